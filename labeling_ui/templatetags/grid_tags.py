"""The review dashboard's gold accuracy by screen (grid and single-image), as an inclusion tag so
the dashboard's view stays as it is."""
from django import template

from curation.selectors.grid import gold_accuracy_by_screen

register = template.Library()


@register.inclusion_tag("labeling_ui/_gold_by_screen.html")
def gold_by_screen():
    return {"rows": gold_accuracy_by_screen()}
