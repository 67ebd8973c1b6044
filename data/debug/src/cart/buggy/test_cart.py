from cart import add_item, cart_total


def test_add_to_a_given_cart():
    cart = []
    add_item("tea", 2.5, cart)
    add_item("milk", 1.25, cart)
    assert cart == [("tea", 2.5), ("milk", 1.25)]


def test_returns_the_given_cart():
    cart = [("bread", 3.0)]
    assert add_item("jam", 4.0, cart) is cart


def test_each_call_without_a_cart_starts_a_new_one():
    first = add_item("tea", 2.5)
    second = add_item("bread", 3.0)
    assert first == [("tea", 2.5)]
    assert second == [("bread", 3.0)]


def test_total_of_a_new_cart():
    add_item("apple", 0.5)
    cart = add_item("pear", 0.75)
    assert cart_total(cart) == 0.75


def test_total_is_rounded_to_cents():
    assert cart_total([("a", 0.1), ("b", 0.2)]) == 0.3
