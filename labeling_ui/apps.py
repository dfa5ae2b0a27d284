from django.apps import AppConfig


class LabelingUiConfig(AppConfig):
    name = "labeling_ui"
    verbose_name = "Review"
