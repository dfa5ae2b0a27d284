from __future__ import annotations

from django.contrib.auth.models import Group, User
from django.db import transaction

from curation.audit import audit_record
from curation.roles import ANNOTATOR, CURATOR, RESEARCHER

# username -> (password, role group or None, is_staff, is_superuser). Demo only: printed by
# the demo command, meant for a laptop on localhost.
DEMO_USERS = {
    "annotator": ("annotator-demo", ANNOTATOR, False, False),
    "annotator2": ("annotator2-demo", ANNOTATOR, False, False),
    "curator": ("curator-demo", CURATOR, True, False),
    "researcher": ("researcher-demo", RESEARCHER, True, False),
    "admin": ("admin-demo", None, True, True),
}


@transaction.atomic
def user_create_with_role(*, username: str, password: str, role: str | None, is_staff: bool = False, is_superuser: bool = False,
                          actor: User | None = None) -> tuple[User, bool]:
    """Create a user in a role group (idempotent: an existing user keeps its password)."""
    user, created = User.objects.get_or_create(username=username, defaults={"is_staff": is_staff, "is_superuser": is_superuser})
    if created:
        user.set_password(password)
        user.save()
    if role:
        user.groups.add(Group.objects.get(name=role))
    if created:
        audit_record(actor=actor, action="user_created", target=user, data={"role": role, "staff": is_staff, "superuser": is_superuser})
    return user, created


def users_create_demo() -> dict[str, str]:
    """The demo accounts, one per role; returns username -> password."""
    for username, (password, role, staff, su) in DEMO_USERS.items():
        user_create_with_role(username=username, password=password, role=role, is_staff=staff, is_superuser=su)
    return {u: p for u, (p, *_rest) in DEMO_USERS.items()}
