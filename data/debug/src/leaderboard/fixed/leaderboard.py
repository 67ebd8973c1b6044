"""Rank players by score."""


def ranking(scores):
    """``(place, name, score)`` for every player, best first."""
    ordered = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
    table = []
    for index, (name, score) in enumerate(ordered):
        if table and table[-1][2] == score:
            place = table[-1][0]
        else:
            place = index + 1
        table.append((place, name, score))
    return table


def top(scores, n):
    """The names of the first ``n`` players."""
    return [name for _, name, _ in ranking(scores)[:n]]
