"""The admin, one module per stage (same app, same URLs): importing this package registers
every model admin."""
from curation.admin import class_filter, evaluation, exports, image_pipeline, jobs, review, sources  # noqa: F401
