"""The workbench's own errors: the local stack and the Airflow REST client. Each is a
``KbError``, so the ``kb`` command reports them as it reports the library's."""

from __future__ import annotations

from kb.errors import KbError


class StackError(KbError):
    code = "stack_error"


class PortInUse(StackError):
    code = "port_in_use"


class ServiceDidNotStart(StackError):
    code = "service_did_not_start"


class StackNotRunning(StackError):
    code = "stack_not_running"


class AirflowApiError(KbError):
    code = "airflow_api_error"


class AirflowUnreachable(AirflowApiError):
    """The API did not answer at all (refused, reset, timed out); ``reason`` names how."""

    code = "airflow_unreachable"

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason or message


class AirflowNotFound(AirflowApiError):
    """The API answered 404: no such DAG, run, task or human-in-the-loop request."""

    code = "airflow_not_found"


class AirflowConflict(AirflowApiError):
    """The API answered 409: e.g. a human-in-the-loop request that was answered already."""

    code = "airflow_conflict"
