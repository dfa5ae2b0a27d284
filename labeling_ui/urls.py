from django.urls import path

from . import views

app_name = "labeling_ui"
urlpatterns = [
    path("", views.home, name="home"),
    path("healthz", views.healthz, name="healthz"),
]
