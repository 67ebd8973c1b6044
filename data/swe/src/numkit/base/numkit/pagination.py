"""Split a list into numbered pages (pages are 1-based)."""


def page_count(total, per_page):
    """Number of pages needed to show ``total`` items, ``per_page`` at a time."""
    if per_page < 1:
        raise ValueError("per_page must be at least 1")
    if total < 0:
        raise ValueError("total must not be negative")
    return total // per_page


def paginate(items, page, per_page):
    """Items on ``page`` (1-based); an empty list has one empty page."""
    last = max(1, page_count(len(items), per_page))
    if page < 1 or page > last:
        raise IndexError(f"page {page} out of range 1..{last}")
    start = (page - 1) * per_page
    return items[start : start + per_page]
