"""The HTML report of a run (``computewatch report``): one self-contained page, no network."""

from computewatch.views.html.run import build_html, chart_data, default_filename, write_report

__all__ = ["build_html", "chart_data", "default_filename", "write_report"]
