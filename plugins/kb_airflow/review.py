"""kb_review's human-in-the-loop task: Airflow's ``HITLOperator``, with what the review needs.

- **An answer timeout that ends the wait and says so.** The operator raises
  ``HITLTimeoutError`` when its ``response_timeout`` passes; here that becomes a failure that
  is not retried, naming the document, which stays quarantined and in the review queue.
- **One retry for a lost answer.** Airflow 3.3.2 can lose an answer given before the
  scheduler has handled the exit of the worker that parked the task: the answer queues the
  task again, the worker's late "success" then looks like a state changed externally, and
  the task fails. With a retry the task asks again (a new try, a new request), and
  ``kb review decide`` answers it again: it waits on the task's state, not on a clock.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.providers.standard.operators.hitl import HITLOperator


class ReviewDecisionOperator(HITLOperator):
    def __init__(self, *, response_timeout: timedelta, **kwargs: Any) -> None:
        super().__init__(response_timeout=response_timeout, retries=1, retry_delay=timedelta(seconds=1), **kwargs)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        if event.get("error_type") == "timeout":
            from airflow.sdk.exceptions import AirflowFailException

            key = (context.get("params") or {}).get("key")
            raise AirflowFailException(
                f"no decision within {self.response_timeout}: {key!r} stays quarantined and waits in the review "
                "queue (kb review list); start another review when someone can decide")
        return super().execute_complete(context, event)
