"""kb_review's human-in-the-loop task: Airflow's ``HITLOperator``, with what the review needs.

- **A decision given is taken from the ledger.** ``kb review decide`` records the decision
  (``Ledger.give``, a row keyed by the review run) before it answers the task. Airflow 3.3.2
  can lose that answer: it resumes the parked task, and the worker exit of the try that
  parked it, when the scheduler handles it after that, fails the resumed try as "changed
  externally" (``SchedulerJobRunner.process_executor_events`` spares only a task still
  ``scheduled``; once it is queued again the executor has dropped its key). The failed try is
  retried, and a try that starts with a decision given to its run returns that decision
  instead of asking again. No answer is sent twice, and a try that does not park cannot be
  lost that way, so the one retry is always enough for a decision given through ``kb review``.
  (An answer given in Airflow's UI has no ledger row; if Airflow loses it, the retry asks
  again in the UI.)
- **An answer timeout that ends the wait and says so.** The operator raises
  ``HITLTimeoutError`` when its ``response_timeout`` passes; here that becomes a failure that
  is not retried, naming the document, which stays quarantined and in the review queue.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from airflow.providers.standard.operators.hitl import HITLOperator

log = logging.getLogger(__name__)


class ReviewDecisionOperator(HITLOperator):
    def __init__(self, *, response_timeout: timedelta, **kwargs: Any) -> None:
        super().__init__(response_timeout=response_timeout, retries=1, retry_delay=timedelta(seconds=1), **kwargs)

    def execute(self, context: Any) -> Any:
        given = self._given(context["run_id"])
        if given is not None:
            return given
        return super().execute(context)

    def _given(self, run_id: str) -> dict[str, Any] | None:
        """The decision given to this run in the ledger, as the answer's payload
        (``execute_complete``'s), or None: ask. One that this task could not have taken as an
        answer (an option it does not offer, an author it is not assigned to) is not taken."""
        from kb.ledger_db import Ledger
        from kb.settings import PipelineSettings

        given = Ledger.for_settings(PipelineSettings()).given(run_id)
        if given is None:
            return None
        allowed = {user["id"] for user in self.assigned_users or []}
        if str(given.decision) not in self.options or (allowed and given.decided_by not in allowed):
            log.warning("kb_review run %s: a decision given by %s (%s) is not one this task takes; asking instead",
                        run_id, given.decided_by, given.decision)
            return None
        log.info("kb_review run %s: %s by %s at %s, taken from the ledger instead of asking", run_id,
                 given.decision, given.decided_by, given.decided_at)
        return self.execute_complete(context={}, event={
            "chosen_options": [str(given.decision)], "params_input": dict(given.params),
            "responded_at": datetime.fromisoformat(given.decided_at),
            "responded_by_user": {"id": given.decided_by, "name": given.decided_by}})

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        if event.get("error_type") == "timeout":
            from airflow.sdk.exceptions import AirflowFailException

            key = (context.get("params") or {}).get("key")
            raise AirflowFailException(
                f"no decision within {self.response_timeout}: {key!r} stays quarantined and waits in the review "
                "queue (kb review list); start another review when someone can decide")
        return super().execute_complete(context, event)
