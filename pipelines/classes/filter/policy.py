"""Policies: which rules run, how severe each is, and their parameters.

A policy is a preset name or a YAML/JSON file::

    name: my-study            # optional; defaults to the file name
    extends: imagenet-ood     # optional; the preset it starts from (default imagenet-ood)
    rules:
      sister_of_id: off                       # a severity alone: remove, flag or off
      organism: {exceptions: [person.n.01]}   # parameters (and/or severity) of one rule
      too_few_images: {severity: remove, min_images: 200}

Anything unknown (a rule, a parameter, a severity) is an error that names the file and the key,
so a typo cannot silently run a different policy.
"""
from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .rules import RULES, SEVERITIES


class PolicyError(ValueError):
    """A policy could not be used; the message names the file (or preset) and the key."""


# Each preset lists only what differs from the rules' registered defaults.
PRESETS: dict[str, dict[str, Any]] = {
    # ImageNet-OOD (Yang et al., sec. 3.2): ID classes, hypernyms, hyponyms and all of organism
    # removed automatically; sister classes compared by hand (here: flagged for a curator).
    "imagenet-ood": {
        "description": "ImageNet-OOD's construction: remove ID classes, hypernyms, hyponyms and organism "
                       "hyponyms; flag lexical overlaps and sister classes for a curator.",
        "rules": {"same_lemma": "flag", "part_whole": "flag"},
    },
    # C-OOD (Galil et al., sec. 4): remove ID, hypernyms, hyponyms, whole/component pairs and
    # practically identical classes; keep biological look-alikes (no organism rule); >= 200 images.
    "cood": {
        "description": "C-OOD's construction: remove ID classes, hypernyms, hyponyms, whole/component pairs and "
                       "same-lemma classes; keep organisms; require 200 images per class.",
        "rules": {"organism": "off", "sister_of_id": "off", "too_few_images": {"severity": "remove", "min_images": 200}},
    },
    # NINCO (Bitterwolf et al., sec. 3), read non-permissively: anything that may show an ID
    # object goes, so every rule that would only flag removes.
    "strict": {
        "description": "NINCO's non-permissive reading: every rule removes, nothing is left to a curator's judgement.",
        "rules": {slug: "remove" for slug in RULES if slug != "not_in_wordnet"},
    },
}
DEFAULT_PRESET = "imagenet-ood"


@dataclass(frozen=True)
class Policy:
    name: str
    origin: str  # "preset imagenet-ood" or the file path
    severities: dict[str, str]
    params: dict[str, dict[str, Any]]

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "rules": {slug: {"severity": self.severities[slug], **self.params[slug]} for slug in RULES}}

    @property
    def digest(self) -> str:
        """SHA-256 of the resolved policy: two runs with equal digests applied the same rules."""
        return hashlib.sha256(json.dumps(self.as_dict(), sort_keys=True).encode()).hexdigest()


def _base() -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
    return ({slug: spec.default_severity for slug, spec in RULES.items()},
            {slug: copy.deepcopy(spec.params) for slug, spec in RULES.items()})


def _apply(severities, params, overrides: Any, where: str) -> None:
    if overrides is None:
        return
    if not isinstance(overrides, dict):
        raise PolicyError(f"{where}: 'rules' must be a mapping of rule slug -> severity or settings")
    for slug, value in overrides.items():
        if slug not in RULES:
            raise PolicyError(f"{where}: unknown rule {slug!r}; rules are: {', '.join(RULES)}")
        if value is False:  # YAML reads a bare `off` as false
            value = "off"
        if isinstance(value, str):
            value = {"severity": value}
        if not isinstance(value, dict):
            raise PolicyError(f"{where}: rules.{slug} must be a severity ({'/'.join(SEVERITIES)}) or a mapping")
        for key, setting in value.items():
            if key == "severity":
                if setting is False:
                    setting = "off"
                if setting not in SEVERITIES:
                    raise PolicyError(f"{where}: rules.{slug}.severity is {setting!r}; use one of {', '.join(SEVERITIES)}")
                severities[slug] = setting
            elif key in params[slug]:
                default = RULES[slug].params[key]
                if isinstance(default, list):
                    if not isinstance(setting, list) or not all(isinstance(x, str) for x in setting):
                        raise PolicyError(f"{where}: rules.{slug}.{key} must be a list of strings")
                elif isinstance(default, int):
                    if isinstance(setting, bool) or not isinstance(setting, int) or setting < 0:
                        raise PolicyError(f"{where}: rules.{slug}.{key} must be a whole number >= 0, not {setting!r}")
                params[slug][key] = setting
            else:
                known = ", ".join(["severity", *params[slug]])
                raise PolicyError(f"{where}: rules.{slug} has no setting {key!r} (it has: {known})")


def preset_policy(name: str) -> Policy:
    if name not in PRESETS:
        raise PolicyError(f"unknown preset {name!r}; presets: {', '.join(PRESETS)} (or give a .yaml/.json policy file)")
    severities, params = _base()
    _apply(severities, params, PRESETS[name]["rules"], f"preset {name}")
    return Policy(name=name, origin=f"preset {name}", severities=severities, params=params)


def policy_from_mapping(data: Any, where: str, default_name: str) -> Policy:
    if not isinstance(data, dict):
        raise PolicyError(f"{where}: a policy is a mapping with 'rules' (and optionally 'name', 'extends')")
    unknown = set(data) - {"name", "extends", "rules", "description"}
    if unknown:
        raise PolicyError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; a policy has name, extends, description, rules")
    base = data.get("extends", DEFAULT_PRESET)
    if base not in PRESETS:
        raise PolicyError(f"{where}: extends {base!r}, which is not a preset ({', '.join(PRESETS)})")
    severities, params = _base()
    _apply(severities, params, PRESETS[base]["rules"], f"preset {base}")
    _apply(severities, params, data.get("rules"), where)
    name = str(data.get("name") or default_name)
    return Policy(name=name, origin=where, severities=severities, params=params)


def load_policy(spec: str | None) -> Policy:
    """A preset name, or a path to a YAML (.yaml/.yml) or JSON (.json) policy file."""
    if not spec:
        return preset_policy(DEFAULT_PRESET)
    if spec in PRESETS:
        return preset_policy(spec)
    path = Path(spec)
    if not path.is_file():
        raise PolicyError(f"{spec}: neither a preset ({', '.join(PRESETS)}) nor a policy file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyError(f"{path}: cannot read it ({exc})") from None
    return policy_from_text(text, where=str(path), default_name=path.stem, json_only=path.suffix.lower() == ".json")


def policy_from_text(text: str, *, where: str, default_name: str, json_only: bool = False) -> Policy:
    try:
        if json_only:
            data = json.loads(text)
        else:
            import yaml  # JSON is YAML too

            data = yaml.safe_load(text)
    except Exception as exc:  # yaml.YAMLError, json.JSONDecodeError
        raise PolicyError(f"{where}: not valid {'JSON' if json_only else 'YAML/JSON'}: {exc}") from None
    return policy_from_mapping(data, where, default_name)
