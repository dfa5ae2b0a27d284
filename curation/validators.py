"""Django form validators over the one name rule (pipelines/names.py)."""
from __future__ import annotations

from django.core.exceptions import ValidationError

from pipelines.names import NAME_MAX, InvalidName, check_name


class NameValidator:
    def __init__(self, what: str, max_length: int = NAME_MAX):
        self.what, self.max_length = what, max_length

    def __call__(self, value: str) -> None:
        try:
            check_name(value, what=self.what, max_length=self.max_length)
        except InvalidName as exc:
            raise ValidationError(str(exc), code="invalid_name") from None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NameValidator) and (self.what, self.max_length) == (other.what, other.max_length)


def name_field(what: str, *, max_length: int = NAME_MAX, **kwargs):
    """A form field for a user-chosen name: the rule in its help text and its validation."""
    from django import forms

    from pipelines.names import NAME_RULE

    kwargs.setdefault("help_text", NAME_RULE)
    return forms.CharField(max_length=max_length, strip=False, validators=[NameValidator(what, max_length)], **kwargs)
