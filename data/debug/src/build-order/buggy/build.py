"""Order build steps so that every step comes after the steps it needs."""


class CycleError(ValueError):
    """The dependencies contain a cycle."""


def build_order(deps):
    """Every step once, each after the steps it needs (step -> list of needed steps)."""
    order = []
    done = set()

    def visit(step):
        if step in done:
            return
        for step in deps.get(step, []):
            visit(step)
        done.add(step)
        order.append(step)

    for step in sorted(deps):
        visit(step)
    return order
