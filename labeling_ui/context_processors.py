"""What every page's navigation needs: the user's roles and which links they can follow. Pages
show a link only where ``can`` says the user may open it, so no role meets a 403 by clicking."""
from __future__ import annotations

from curation.roles import ANNOTATOR, CURATOR, RESEARCHER, user_roles

# What each role may do, for the navigation's title and the 403 page (docs/review.md, README's roles).
ROLE_SUMMARY = {
    ANNOTATOR: "annotators review images for ID objects (Review)",
    CURATOR: "curators browse the images, follow review progress, adjudicate, judge flagged classes and duplicates, and create exports",
    RESEARCHER: "researchers browse the images, read exports, and run and read evaluations",
}


def navigation(request) -> dict:
    user = getattr(request, "user", None)
    roles = user_roles(user) if user is not None else set()
    staff = bool(getattr(user, "is_staff", False) and user.is_active)

    def perm(codename: str) -> bool:
        return staff and user.has_perm(f"curation.{codename}")

    can = {
        "review": ANNOTATOR in roles,
        "review_progress": bool(roles & {CURATOR, RESEARCHER}),
        "exports": bool(roles & {CURATOR, RESEARCHER}),
        "evaluations": bool(roles & {CURATOR, RESEARCHER}),
        "browse": bool(roles & {CURATOR, RESEARCHER}),
        "curate_images": CURATOR in roles,
        "adjudicate": CURATOR in roles,
        "flagged_classes": CURATOR in roles,
        "class_filter": bool(roles & {CURATOR, RESEARCHER}) or staff,
        "admin": staff,
        "create_export": perm("add_export"),
        "create_evaluation": perm("add_evaluationrun"),
        "review_settings": perm("view_reviewsettings"),
        "annotator_scopes": perm("view_annotatorscope"),
    }
    return {"roles": sorted(roles), "can": can,
            "role_summary": [ROLE_SUMMARY[r] for r in sorted(roles)] or ["this account has no role yet; a staff admin gives one"]}
