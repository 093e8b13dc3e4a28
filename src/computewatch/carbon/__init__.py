"""Grid carbon intensity over time: hourly history and forecasts from providers or a file,
the best window to run, the best region, and the Software Carbon Intensity score."""
