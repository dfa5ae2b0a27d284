from django.urls import path

from . import views

app_name = "labeling_ui"
urlpatterns = [
    path("", views.home, name="home"),
    path("healthz", views.healthz, name="healthz"),
    path("class-filter/<int:run_id>/", views.class_filter_report, name="class_filter_report"),
    path("class-filter/<int:run_id>/decisions.csv", views.class_filter_csv, name="class_filter_csv"),
]
