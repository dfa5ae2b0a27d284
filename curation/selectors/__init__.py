"""Reads. Views, commands and the admin ask these rather than building queries themselves;
writes are in curation.services.

One module per stage, as in curation/models/ and curation/admin/: sources, class_filter (the
class policy among them), review, adjudication, grid, browse, duplicates, similar, exports,
evaluation, jobs. The reads callers have always imported from ``curation.selectors`` are
re-exported here; the others are imported from their module."""
from curation.selectors.adjudication import adjudication_queue
from curation.selectors.browse import (
    BROWSE_SORT_LABELS,
    BROWSE_SORTS,
    COUNT_CAP,
    FINAL_LABELS,
    BrowseError,
    BrowseFilters,
    BrowsePage,
    browse_choices,
    browse_filters_from,
    browse_queryset,
    image_browse,
    image_detail,
)
from curation.selectors.class_filter import (
    CLASS_DECISION_CSV_COLUMNS,
    CLASS_DECISION_FILTERS,
    ClassPolicy,
    ClassStanding,
    class_decision_csv_rows,
    class_decision_search,
    class_filter_report,
    class_filter_runs,
    class_policy,
    latest_class_filter_run,
)
from curation.selectors.evaluation import EVAL_CSV_COLUMNS, evaluation_csv_rows, evaluation_json, evaluation_list, evaluation_plot_path
from curation.selectors.exports import export_list
from curation.selectors.jobs import recent_jobs
from curation.selectors.review import (
    Scope,
    annotator_progress,
    annotator_queue,
    annotator_scope,
    contamination_report,
    flagged_classes,
    id_class_list,
    id_examples,
    not_seen_by,
    review_dashboard,
    review_payload,
    review_reads_cache_clear,
)
from curation.selectors.sources import default_id_class_set, source_broken_images, source_summaries

__all__ = [
    "BROWSE_SORTS",
    "BROWSE_SORT_LABELS",
    "CLASS_DECISION_CSV_COLUMNS",
    "CLASS_DECISION_FILTERS",
    "COUNT_CAP",
    "EVAL_CSV_COLUMNS",
    "FINAL_LABELS",
    "BrowseError",
    "BrowseFilters",
    "BrowsePage",
    "ClassPolicy",
    "ClassStanding",
    "Scope",
    "adjudication_queue",
    "annotator_progress",
    "annotator_queue",
    "annotator_scope",
    "browse_choices",
    "browse_filters_from",
    "browse_queryset",
    "class_decision_csv_rows",
    "class_decision_search",
    "class_filter_report",
    "class_filter_runs",
    "class_policy",
    "contamination_report",
    "default_id_class_set",
    "evaluation_csv_rows",
    "evaluation_json",
    "evaluation_list",
    "evaluation_plot_path",
    "export_list",
    "flagged_classes",
    "id_class_list",
    "id_examples",
    "image_browse",
    "image_detail",
    "latest_class_filter_run",
    "not_seen_by",
    "recent_jobs",
    "review_dashboard",
    "review_payload",
    "review_reads_cache_clear",
    "source_broken_images",
    "source_summaries",
]
