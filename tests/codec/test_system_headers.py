from vpq.codec import system_headers as sh


def test_defaults_store_nothing():
    assert sh.attribute_headers(None, 0, None) == ()
    assert sh.split(()) == (sh.NO_ATTRIBUTES, ())


def test_round_trip_keeps_user_headers_apart():
    reserved = sh.attribute_headers(1_700_000_000_123, 7, "order-42/1")
    headers = reserved + (("h", b"v"), ("trace", b"x"))
    attrs, own = sh.split(headers)
    assert attrs == sh.Attributes(1_700_000_000_123, 7, "order-42/1")
    assert own == (("h", b"v"), ("trace", b"x"))
    assert sh.user_headers(headers) == own


def test_unparseable_reserved_values_are_ignored():
    attrs, own = sh.split(((sh.DELIVER_AT, b"soon"), (sh.PRIORITY, b"10"), ("a", b"b")))
    assert attrs == sh.NO_ATTRIBUTES
    assert own == (("a", b"b"),)


def test_user_headers_without_reserved_are_the_same_object():
    headers = (("a", b"b"),)
    assert sh.user_headers(headers) is headers
    assert sh.is_reserved(":x") and not sh.is_reserved("x:")


def test_attributes_are_split_without_the_own_headers():
    cases = [
        (),
        (("a", b"b"),),
        ((sh.DEDUP, b"d-1"),),
        ((sh.DEDUP, b"\xff"), ("a", b"b")),
        ((sh.DELIVER_AT, b"123"), (sh.PRIORITY, b"7"), (sh.DEDUP, b"x"), ("a", b"b"), (sh.GROUP, b"g")),
        ((sh.DELIVER_AT, b"soon"), (sh.PRIORITY, b"10"), (sh.PRIORITY, b"4")),
    ]
    for headers in cases:
        assert sh.attributes(headers) == sh.split(headers)[0]
    assert sh.attributes(((sh.DEDUP, b"d"),)) == sh.Attributes(None, 0, "d")
    assert sh.attributes(((sh.PRIORITY, b"x"),)) is sh.NO_ATTRIBUTES
    assert sh.user_headers(((sh.DEDUP, b"d"), ("a", b"b"))) == (("a", b"b"),)


def test_reader_attributes_agree_with_attributes_and_addressing():
    cases = [
        (),
        (("a", b"b"),),
        ((sh.DEDUP, b"d-1"),),
        ((sh.DELIVER_AT, b"123"), (sh.PRIORITY, b"7"), (sh.DEDUP, b"x"), ("a", b"b"), (sh.GROUP, b"g")),
        ((sh.DELIVER_AT, b"soon"), (sh.PRIORITY, b"10"), (sh.GROUP, b"g1"), (sh.GROUP, b"g2")),
    ]
    for headers in cases:
        deliver_at, priority, group = sh.reader_attributes(headers)
        attrs = sh.attributes(headers)
        assert (deliver_at, priority) == (attrs.deliver_at_ms, attrs.priority)
        for mine in (b"g", b"g1", b"g2"):
            assert (group is not None and group != mine) == sh.addressed_elsewhere(headers, mine)
