"""The review dashboard's gold accuracy by screen (grid and single-image), as an inclusion tag
over the rows the review figures' snapshot holds."""
from django import template

register = template.Library()


@register.inclusion_tag("labeling_ui/_gold_by_screen.html")
def gold_by_screen(rows):
    """``rows``: ``curation.selectors.grid.gold_accuracy_by_screen``'s, as of the review figures'
    snapshot (it reads every gold review and every grid page's audit entry)."""
    return {"rows": rows}
