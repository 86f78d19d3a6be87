"""Traffic figures: the statistics rows write nodes export for the Spark job, and the
per-process produce meter."""
