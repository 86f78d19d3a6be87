"""Queue administration and placement-map writing, shared by gateways and read nodes."""
