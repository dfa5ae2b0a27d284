"""Stage 5, export: writing an export's files and manifest (write.py), its layouts (layouts/:
NINCO, ImageNet-OOD, OpenOOD, Hugging Face), diffs between versions, datasheets, the leakage check,
OOD unit-test sets and CSV cells a spreadsheet cannot run. Driven by curation/services/exports.py."""
