"""A person approves a restore that would replace data, before anything is touched.

`approve` follows a restore's preflight: when the plan carries `at_risk` (data on the target would be replaced,
with or without `force`, and the deployment's LASTLINE_APPROVAL or the target connection's extra `approval` asks),
the run waits on Airflow's human-in-the-loop approval showing the blast radius: the databases and tables to be
replaced with their rows, size and last write, and the backup's id and age. Approve: the restore goes on (a run
started without `force` replaces as `force` would: the approval is what allows it). Reject, or no answer in
time: the run fails at once, nothing touched. Nothing at risk (an empty target, a resumed restore, a target that
asks no approval): the preflight that made the plan skips `approve` as it ends (`deciding`), so no task starts for it
and the step after it (trigger rule none_failed_min_one_success) follows the preflight at once; an `approve` that runs anyway (cleared
by hand) passes straight through.
"""
from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from airflow.providers.standard.exceptions import HITLTimeoutError, HITLTriggerEventError
from airflow.providers.standard.operators.hitl import ApprovalOperator, HITLOperator
from airflow.sdk import get_current_context
from airflow.sdk.exceptions import DownstreamTasksSkipped

from lastline.airflow.alerts import Alert
from lastline.core.errors import Refusal

LISTED = 40
log = logging.getLogger(__name__)


def _size(n: int) -> str:
    return f"{n / 1e9:,.1f} GB" if n >= 1e9 else f"{n / 1e6:,.1f} MB"


def code(name: str, cell: bool = False) -> str:
    """A name from the target as Markdown code, whatever it holds: a fence longer than any run of backticks in it
    (padded where it starts or ends with one), and in a table cell its `|` escaped, so a table named to look like
    something else cannot change what the approver reads."""
    text = str(name).replace("\n", " ")
    fence = "`" * (max((len(r) for r in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    out = f"{fence}{pad}{text}{pad}{fence}"
    return out.replace("|", "\\|") if cell else out


def subject(plan: dict) -> str:
    risk = plan["at_risk"]
    return (f"Replace {risk.get('table_count', 0)} table(s) in {len(risk.get('databases', []))} database(s) on "
            f"{risk['target']} with {_replacement(risk)}?")


def _replacement(risk: dict) -> str:
    """What replaces the data: a backup, or (a replica rebuild) a fresh copy of its source."""
    return f"backup {risk['backup_id']}" if risk.get("backup_id") else f"a fresh copy of {risk.get('source', '?')}"


def body(plan: dict) -> str:
    """The blast radius as Markdown."""
    risk = plan["at_risk"]
    age = f"{risk['age_hours']:,.1f} hours old" if risk.get("age_hours") is not None else "age unknown"
    what = (f"**Backup** `{risk['backup_id']}` (taken {risk.get('taken_at') or '?'}, {age})" if risk.get("backup_id") else
            f"**A fresh copy of** {risk.get('source', '?')} (streamed now, node to node)")
    lines = [
        f"{what} will replace, on **{risk['target']}**:",
        "",
        f"- databases: {', '.join(code(d) for d in risk.get('databases', [])) or '(none listed)'}",
        f"- {risk.get('table_count', 0):,} table(s), about {risk.get('rows', 0):,} rows, {_size(risk.get('bytes', 0))}",
    ]
    if risk.get("datadir"):
        lines.append(f"- the whole datadir `{risk['datadir']}` (moved aside, deleted once the restore is verified)")
    if risk.get("note"):
        lines.append(f"- {risk['note']}")
    if risk.get("force") is False:  # plans made before the key was recorded say nothing of it
        lines += ["", "The restore was started **without force**: approving is what replaces this data; rejecting leaves "
                  "it as it is."]
    tables = risk.get("tables", [])
    if tables:
        lines += ["", "| table | rows (estimate) | size | last write |", "|---|---:|---:|---|"]
        for t in tables[:LISTED]:
            lines.append(f"| {code(t['table'], cell=True)} | {t['rows']:,} | {_size(t['bytes'])} | {t['updated'] or 'not since the server started'} |")
        if risk.get("table_count", 0) > LISTED:
            lines.append(f"| ... and {risk['table_count'] - LISTED:,} more | | | |")
    lines += ["", "The replaced data is kept aside until the restore is verified. **Reject** ends the run with nothing touched."]
    return "\n".join(lines)


def deciding(preflight: Callable[..., dict]) -> Callable[..., dict]:
    """`preflight` (a task's callable returning its plan as a dict) deciding the approval: with nothing at risk, the
    ApproveReplacement tasks right after its task are skipped as it ends, its plan pushed as the task runner pushes a
    return value (each key too where the task has multiple_outputs, then the whole), which a skip would otherwise
    leave out."""

    @functools.wraps(preflight)
    def call(*args: Any, **kwargs: Any) -> dict:
        plan = preflight(*args, **kwargs)
        if plan.get("at_risk"):
            return plan
        ti = get_current_context()["ti"]
        approvals = [t.task_id for t in ti.task.downstream_list if isinstance(t, ApproveReplacement)]
        if not approvals:
            return plan
        log.info("no approval needed (nothing on the target is replaced, the restore resumes, or the target asks no "
                 "approval): %s skipped", ", ".join(approvals))
        for key, value in plan.items() if getattr(ti.task, "multiple_outputs", False) else ():
            ti.xcom_push(key, value)
        ti.xcom_push("return_value", plan)
        raise DownstreamTasksSkipped(tasks=approvals)

    return call


class ApproveReplacement(ApprovalOperator):
    """Approval of a destructive restore (see the module); `plan` is the preflight's plan (an XComArg)."""

    template_fields = (*HITLOperator.template_fields, "plan")

    def __init__(self, *, plan: Any, **kwargs: Any) -> None:
        self.hours = float(kwargs.pop("response_hours", 72))
        super().__init__(subject="Approve a restore that replaces data", body="(filled in when the run gets here)",
                         response_timeout=timedelta(hours=self.hours), **kwargs)
        self.plan = plan

    def execute(self, context: Any) -> Any:
        plan = dict(self.plan or {})
        if not plan.get("at_risk"):
            self.log.info("no approval needed: nothing on the target is replaced, the restore resumes, or the target "
                          "asks no approval")
            return {"approved": "not needed"}
        self.subject, self.body = subject(plan), body(plan)
        self.notifiers = [Alert("approval_needed", message=f"lastline: approval needed: {self.subject}")]
        self.log.info("waiting for approval: %s", self.subject)
        return super().execute(context)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        try:
            ret = HITLOperator.execute_complete(self, context, event)
        except (HITLTimeoutError, HITLTriggerEventError) as exc:  # waiting again would not change the answer
            raise Refusal(f"no approval within {self.hours:g} hours ({exc}): nothing on the target was touched; "
                          "trigger the restore again when someone can approve it.") from exc
        who = (ret.get("responded_by_user") or {}).get("name") or "someone"
        if ret["chosen_options"][0] != self.APPROVE:
            raise Refusal(f"the restore was rejected by {who}: nothing on the target was touched.")
        self.log.info("approved by %s", who)
        return ret
