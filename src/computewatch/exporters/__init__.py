"""Exporting metrics beyond Prometheus: OpenTelemetry (OTLP/HTTP) and CloudWatch's Embedded
Metric Format."""
