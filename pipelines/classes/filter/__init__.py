"""Class-level curation: explainable WordNet rules that remove or flag candidate classes that
overlap the ID classes (plain Python over the compact noun graph; no Django here)."""
from .engine import CSV_COLUMNS, DECISIONS, Decision, FilterInputError, FilterResult, Override, run_class_filter
from .policy import DEFAULT_PRESET, PRESETS, Policy, PolicyError, load_policy, policy_from_text, preset_policy
from .rules import RULES, SEVERITIES, Candidate, FilterContext, Hit

__all__ = [
    "CSV_COLUMNS", "DECISIONS", "DEFAULT_PRESET", "PRESETS", "RULES", "SEVERITIES", "Candidate", "Decision",
    "FilterContext", "FilterInputError", "FilterResult", "Hit", "Override", "Policy", "PolicyError",
    "load_policy", "policy_from_text", "preset_policy", "run_class_filter",
]
