"""Stage 6, evaluation: a run of detectors x models over an export (run.py), the OOD detectors
(detectors/), metrics, C-OOD severity levels, the random-weight sanity check, covariate-shift
corruptions, vision-language models and plots. Driven by curation/services/evaluation.py."""
