"""Grid carbon intensity over time: hourly history and forecasts from providers or a file,
the best window to run, the best region, and the Software Carbon Intensity score.

- :mod:`~computewatch.carbon.records`: ``IntensityPoint`` (time, g/kWh, provider, resolution,
  forecast or history), ``IntensitySeries`` and the errors;
- :mod:`~computewatch.carbon.providers`: Electricity Maps, WattTime, UK Carbon Intensity and a
  file, behind ``IntensityProvider``; :mod:`~computewatch.carbon.cache` keeps answers on disk;
- :mod:`~computewatch.carbon.window`: the exact best start of a job over a forecast;
- :mod:`~computewatch.carbon.timed`: a run's carbon summed over its intervals;
- :mod:`~computewatch.carbon.regions`: the same job across regions (intensity, PUE, price);
- :mod:`~computewatch.carbon.sci`: SCI (ISO/IEC 21031:2024).

docs/carbon.md describes them; the CLI's ``when``, ``where`` and ``run --start-when-green``.
"""
