"""The C extensions; everything else about the package is in pyproject.toml.

An extension is optional: where it cannot be built (no C compiler) the install goes on
and the pure-Python code does its work (tests/read_nodes/test_fast_render.py and the other
tests of each extension check that both agree, and under VPQ_TEST_STRICT that it was built)."""

from setuptools import Extension, setup

SLOTS = "read_nodes/_msg_slots.h"

setup(
    ext_modules=[
        Extension("vpq.read_nodes._fast_render", ["read_nodes/_fast_render.c"], optional=True),
        Extension("vpq.read_nodes._fast_decode", ["read_nodes/_fast_decode.c"], optional=True),
        Extension("vpq.read_nodes._fast_offer", ["read_nodes/_fast_offer.c"], depends=[SLOTS], optional=True),
        Extension("vpq.read_nodes._fast_deliver", ["read_nodes/_fast_deliver.c"], depends=[SLOTS], optional=True),
        Extension("vpq.produce_path._fast_results", ["produce_path/_fast_results.c"], optional=True),
    ],
)
