"""Issue 32: a costly detector (WeiPer: r x C perturbed logits per image) is declared so in its own
file and left out of the default selection everywhere (the admin form's ticks, `evaluate`
without --methods); chosen by name it runs as any other."""
from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from pipelines.evaluation.detectors import DETECTORS, default_detectors, detector_names

pytestmark = pytest.mark.django_db


def test_costly_detectors_are_offered_but_not_ticked():
    from curation.admin.evaluation import EvaluationCreateForm

    costly = [n for n in detector_names() if DETECTORS[n].costly]
    assert costly == ["csp", "weiper"]  # CSP (issue 46): about 800,000 prompts through the text encoder
    # the zero-shot CLIP detectors join the default selection when a run has a CLIP model (issue 46)
    assert default_detectors() == [n for n in detector_names() if n != "weiper" and not DETECTORS[n].needs_text]
    form = EvaluationCreateForm()
    assert "weiper" in dict(form.fields["methods"].choices) and "not ticked by default" in dict(form.fields["methods"].choices)["weiper"]
    assert form.fields["methods"].initial == default_detectors()
    out = io.StringIO()
    call_command("detectors", stdout=out)
    assert "not run unless named (--methods, or ticked in the admin): weiper:" in out.getvalue()
