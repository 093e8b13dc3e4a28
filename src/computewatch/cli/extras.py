"""Which extra installs a missing optional dependency, so that a command run without it says
``pip install 'computewatch[EXTRA]'`` in one line instead of an internal error.

The table maps the top-level module a command imports to what a user knows it as and the
extra of pyproject.toml that installs it; tests/cli/test_extras.py checks every row against
the installed distributions and pyproject.toml.
"""

from __future__ import annotations

from typing import Final

from computewatch.errors import PROG

__all__ = ["COMMAND_EXTRAS", "OPTIONAL_MODULES", "Optional", "missing_extra_message"]


class Optional:
    """An optional dependency: its name as users know it and the extras that install it (the
    one a command is named for first, see COMMAND_EXTRAS). A plain class: the parser's modules
    load no dataclasses at start-up (tests/cli/test_parser.py)."""

    __slots__ = ("extras", "name")

    def __init__(self, name: str, *extras: str) -> None:
        self.name = name
        self.extras: tuple[str, ...] = extras


COMMAND_EXTRAS: Final[dict[str, str]] = {
    "server": "server",
    "ledger": "governance",
    "governance": "governance",
    "accounts": "governance",
    "detect": "governance",
}
"""The extra a command's own dependencies come with, preferred when a module is in several."""


OPTIONAL_MODULES: Final[dict[str, Optional]] = {
    "fastapi": Optional("FastAPI", "server"),
    "starlette": Optional("Starlette (FastAPI)", "server"),
    "uvicorn": Optional("Uvicorn", "server"),
    "sqlalchemy": Optional("SQLAlchemy", "server"),
    "alembic": Optional("Alembic", "server"),
    "psycopg": Optional("psycopg", "server"),
    "jinja2": Optional("Jinja2", "server"),
    "markupsafe": Optional("MarkupSafe", "server"),
    "pydantic": Optional("Pydantic", "server"),
    "multipart": Optional("python-multipart", "server"),
    "python_multipart": Optional("python-multipart", "server"),
    "cryptography": Optional("cryptography", "governance", "server"),
    "sklearn": Optional("scikit-learn", "governance"),
    "numpy": Optional("NumPy", "governance"),
    "pyarrow": Optional("pyarrow", "parquet"),
    "pynvml": Optional("nvidia-ml-py", "nvidia"),
    "amdsmi": Optional("amdsmi", "amd"),
    "prometheus_client": Optional("prometheus_client", "agent"),
    "tpu_info": Optional("tpu-info", "tpu"),
    "grpc": Optional("gRPC", "tpu"),
    "mlflow": Optional("MLflow", "trackers"),
    "wandb": Optional("W&B", "trackers"),
    "tensorboard": Optional("TensorBoard", "trackers"),
    "neptune": Optional("Neptune", "trackers"),
    "mlperf_loadgen": Optional("MLCommons LoadGen", "bench"),
    "opentelemetry": Optional("the OpenTelemetry SDK", "otel"),
    "pytorch_lightning": Optional("PyTorch Lightning", "lightning"),
    "transformers": Optional("Transformers", "huggingface"),
    "accelerate": Optional("Accelerate", "huggingface"),
    "keras": Optional("Keras", "keras"),
}


def missing_extra_message(exc: ModuleNotFoundError, command: str | None = None) -> str | None:
    """The one line that says which extra to install for ``exc``; None when the missing module
    is not an optional dependency (a bug, reported as one)."""
    top = (exc.name or "").split(".")[0]
    dep = OPTIONAL_MODULES.get(top)
    if dep is None:
        return None
    preferred = COMMAND_EXTRAS.get(command or "")
    extra = preferred if preferred in dep.extras else dep.extras[0]
    what = f"'{PROG} {command}'" if command else PROG
    return (
        f"{what} needs {dep.name}, which is not installed: "
        f"pip install 'computewatch[{extra}]' (or 'computewatch[all]')"
    )
