"""Recording who did what: one AuditLog row per action (persistence only, used by services and the job runner alike)."""
from __future__ import annotations

from typing import Any

from django.db import models

from curation.models import AuditLog


def audit_record(*, actor, action: str, target: models.Model | None = None, data: dict[str, Any] | None = None) -> AuditLog:
    return AuditLog.objects.create(
        actor=actor if getattr(actor, "pk", None) else None,
        action=action,
        target_type=target._meta.label_lower if target is not None else "",
        target_id=str(target.pk) if target is not None else "",
        data=data or {},
    )
