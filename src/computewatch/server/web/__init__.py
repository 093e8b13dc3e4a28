"""The server's web dashboard (docs/dashboard.md): pages for what runs now, every run, one run,
a comparison, usage and cost, budgets and the fleet, refreshed live; installed into the server's
app by :func:`install_dashboard`."""

from computewatch.server.web.pages import DashboardOptions, install_dashboard, options_from_config

__all__ = ["DashboardOptions", "install_dashboard", "options_from_config"]
