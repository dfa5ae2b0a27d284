from django.urls import path

from . import browse_views, certify_views, evaluation_views, export_views, grid_views, map_views, review_views, similar_views, views

app_name = "labeling_ui"
urlpatterns = [
    path("", views.home, name="home"),
    path("healthz", views.healthz, name="healthz"),
    path("class-filter/<int:run_id>/", views.class_filter_report, name="class_filter_report"),
    path("class-filter/<int:run_id>/decisions.csv", views.class_filter_csv, name="class_filter_csv"),
    # review: annotators
    path("review/", review_views.queue, name="review_queue"),
    path("review/screen/", review_views.screen, name="review_screen"),
    path("api/review/next", review_views.api_next, name="api_review_next"),
    path("api/review/submit", review_views.api_submit, name="api_review_submit"),
    path("api/review/undo", review_views.api_undo, name="api_review_undo"),
    path("review/grid/", grid_views.grid_screen, name="review_grid"),
    path("api/review/grid/next", grid_views.api_grid_next, name="api_review_grid_next"),
    path("api/review/grid/submit", grid_views.api_grid_submit, name="api_review_grid_submit"),
    path("api/review/grid/undo", grid_views.api_grid_undo, name="api_review_grid_undo"),
    path("api/id-classes", review_views.api_id_classes, name="api_id_classes"),
    path("images/<int:image_id>/<str:variant>", review_views.image_file, name="image_file"),
    path("api/images/thumbs", review_views.image_thumbs, name="image_thumbs"),
    # review: curators
    path("curate/reviews/", review_views.dashboard, name="review_dashboard"),
    path("curate/reviews/source/<int:source_id>/", review_views.source_settings, name="review_source_settings"),
    path("curate/adjudicate/", review_views.adjudicate, name="adjudicate"),
    path("api/adjudicate/decide", review_views.api_adjudicate_decide, name="api_adjudicate_decide"),
    path("api/adjudicate/undo", review_views.api_adjudicate_undo, name="api_adjudicate_undo"),
    path("curate/classes/", review_views.classes, name="review_classes"),
    path("curate/contamination/<int:source_id>/", export_views.contamination, name="contamination"),
    path("curate/certify/<int:source_id>/", certify_views.certify, name="certify"),
    path("curate/certify/<int:source_id>/close", certify_views.certify_close, name="certify_close"),
    path("curate/certify/<int:source_id>/release", certify_views.certify_release, name="certify_release"),
    # looking at the data
    path("curate/images/", browse_views.images, name="images"),
    path("curate/images/action", browse_views.images_action, name="images_action"),
    path("curate/images/<int:image_id>/", browse_views.image_detail, name="image_detail"),
    path("curate/images/<int:image_id>/similar/", similar_views.image_similar, name="image_similar"),
    path("api/review/similar-to-front", similar_views.api_similar_to_front, name="api_review_similar_to_front"),
    path("curate/map/", map_views.embedding_map, name="embedding_map"),
    path("curate/map/<int:source_id>/points.json", map_views.embedding_map_json, name="embedding_map_json"),
    path("curate/map/selection", map_views.embedding_map_selection, name="embedding_map_selection"),
    path("curate/duplicates/", browse_views.duplicates, name="duplicates"),
    path("curate/duplicates/<int:image_id>/", browse_views.duplicate_group_page, name="duplicate_group"),
    path("api/wordnet-nouns", browse_views.api_wordnet_nouns, name="api_wordnet_nouns"),
    path("api/browse-classes", browse_views.api_browse_classes, name="api_browse_classes"),
    # exports
    path("exports/", export_views.exports, name="exports"),
    path("evaluations/", evaluation_views.evaluations, name="evaluations"),
    path("evaluations/<int:run_id>/", evaluation_views.evaluation, name="evaluation"),
    path("evaluations/<int:run_id>/results.csv", evaluation_views.evaluation_csv, name="evaluation_csv"),
    path("evaluations/<int:run_id>/leaderboard.csv", evaluation_views.evaluation_leaderboard_csv, name="evaluation_leaderboard_csv"),
    path("evaluations/<int:run_id>/results.json", evaluation_views.evaluation_json, name="evaluation_json"),
    path("evaluations/<int:run_id>/plots/<path:rel>", evaluation_views.evaluation_plot, name="evaluation_plot"),
    path("exports/<int:export_id>/download.<str:fmt>", export_views.download, name="export_download"),
    path("exports/<int:export_id>/datasheet/", export_views.datasheet, name="export_datasheet"),
    path("exports/<int:export_id>/diff/", export_views.diff, name="export_diff"),
]
