"""Roles are Django groups, created by a migration; enforcement is server-side."""
from __future__ import annotations

ANNOTATOR = "annotator"
CURATOR = "curator"
RESEARCHER = "researcher"
ROLES = (ANNOTATOR, CURATOR, RESEARCHER)


def user_roles(user) -> set[str]:
    if not getattr(user, "is_authenticated", False) or not user.is_active:
        return set()
    if user.is_superuser:
        return set(ROLES)
    return set(user.groups.filter(name__in=ROLES).values_list("name", flat=True))


def has_role(user, role: str) -> bool:
    return role in user_roles(user)
