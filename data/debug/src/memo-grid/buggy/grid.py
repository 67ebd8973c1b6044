"""Count monotone paths through a grid with blocked cells."""

from cache import memoize_method


class Grid:
    """``rows`` x ``cols`` cells, some of them blocked."""

    def __init__(self, rows, cols, blocked=()):
        self.rows = rows
        self.cols = cols
        self.blocked = frozenset(blocked)

    def is_open(self, row, col):
        """Is the cell inside the grid and not blocked?"""
        return 0 <= row < self.rows and 0 <= col < self.cols and (row, col) not in self.blocked

    def render(self):
        """One line per row: ``.`` for an open cell, ``#`` for a blocked one."""
        return "\n".join(
            "".join("." if self.is_open(row, col) else "#" for col in range(self.cols))
            for row in range(self.rows)
        )

    @memoize_method
    def paths_from(self, row, col):
        """Paths from ``(row, col)`` to the bottom-right cell, moving right or down."""
        if not self.is_open(row, col):
            return 0
        if (row, col) == (self.rows - 1, self.cols - 1):
            return 1
        return self.paths_from(row + 1, col) + self.paths_from(row, col + 1)

    def count_paths(self):
        """Paths from the top-left cell to the bottom-right cell."""
        return self.paths_from(0, 0)
