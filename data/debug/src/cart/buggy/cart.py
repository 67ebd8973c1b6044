"""A tiny shopping cart."""


def add_item(name, price, cart=[]):
    """Append ``(name, price)`` to ``cart`` and return the cart."""
    cart.append((name, price))
    return cart


def cart_total(cart):
    """The sum of the prices, rounded to cents."""
    return round(sum(price for _, price in cart), 2)
