"""tools/uv_options.py: uv is given the package sources pip is configured with, as pip would use them."""

from tools.uv_options import uv_options

LISTING = """:env:.default-timeout='180'
:env:.find-links='/opt/wheels'
global.cert='/etc/ssl/certs/ca-certificates.crt'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/opt/wheels'
install.index-url='https://mirror.example/simple'
"""


def test_each_source_pip_is_given_reaches_uv_once_and_nothing_else_does():
    options = uv_options(LISTING)
    pairs = list(zip(options[::2], options[1::2]))
    assert pairs == [
        ("--index-strategy", "unsafe-best-match"),
        ("--find-links", "/opt/wheels"),
        ("--constraint", "/etc/xdg/pip/constraints.txt"),
        ("--extra-index-url", "file:///opt/pypi/simple"),
        ("--extra-index-url", "file:///opt/pypi-more/simple"),
        ("--index-url", "https://mirror.example/simple"),
    ]


def test_without_pip_settings_uv_keeps_its_defaults_but_takes_the_best_version_across_indexes():
    assert uv_options("") == ["--index-strategy", "unsafe-best-match"]
