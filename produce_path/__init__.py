"""The produce client that runs in gateways and read nodes: routes messages to physical
partitions, builds record batches and appends them to the write nodes."""
