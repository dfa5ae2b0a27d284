"""The admin, one module per stage (same app, same URLs): importing this package registers
every model admin."""
from django.contrib import admin as _admin

from curation.admin import class_filter, evaluation, exports, image_pipeline, jobs, review, sources  # noqa: F401

# At 1366x768 the admin's side navigation took about 300 px, so the changelists (Jobs: its
# Message column) scrolled inside their box; the breadcrumbs and the index page remain
_admin.site.enable_nav_sidebar = False
