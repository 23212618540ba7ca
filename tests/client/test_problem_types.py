"""Every problem type the service declares (docs/errors.md) has its own exception class in the client."""
from __future__ import annotations

from ldpmarket.api import problem_attributes
from ldpmarket_client import ProblemError, errors
from tests.market.api.test_problem_types import concrete


def test_every_problem_type_of_the_service_has_its_client_class():
    slugs = {problem_attributes(cls)[1]: name for name, cls in concrete().items() if problem_attributes(cls)}
    slugs |= {"invalid-input": "DRF ValidationError", "malformed-request": "DRF ParseError"}
    missing = {slug: name for slug, name in slugs.items() if slug not in errors.BY_SLUG}
    assert not missing, f"no client class for {missing}: add it to client/ldpmarket_client/errors.py"
    for slug, cls in errors.BY_SLUG.items():
        found = errors.problem_class(errors.PROBLEM_BASE + slug, cls.status_code or 400)
        assert found is cls and issubclass(cls, ProblemError) and cls is not ProblemError
    assert len(set(errors.BY_SLUG.values())) == len(errors.BY_SLUG)


def test_unknown_and_blank_types():
    assert errors.problem_class(errors.PROBLEM_BASE + "from-a-newer-server", 418) is ProblemError
    assert errors.problem_class("https://example.org/other", 400) is ProblemError
    assert errors.problem_class("about:blank", 429) is errors.TooManyRequests
    assert errors.problem_class(None, 418) is ProblemError
    exc = errors.problem_class(errors.PROBLEM_BASE + "from-a-newer-server", 418)(
        status=418, type=errors.PROBLEM_BASE + "from-a-newer-server", title="Teapot", detail="short and stout",
        errors={"field": ["bad"]})
    assert (exc.status, exc.title, exc.detail, exc.errors) == (418, "Teapot", "short and stout", {"field": ["bad"]})
    assert str(exc) == "418 Teapot: short and stout"  # the service's detail already names the fields
    assert str(errors.InvalidInput(status=400, title="Invalid input", errors={"epsilon": ["too big"]})) == \
        "400 Invalid input (epsilon: too big)"


def test_the_request_id_comes_from_the_problem_or_else_the_header():
    import requests

    from ldpmarket_client.client import Client

    response = requests.Response()
    response.status_code, response.reason = 502, "Bad Gateway"
    response.headers["X-Request-ID"] = "from-the-header"
    response._content = b"<html>a proxy's page</html>"
    assert Client._problem(response).request_id == "from-the-header"
    response._content = b'{"type": "about:blank", "status": 502, "request_id": "from-the-body"}'
    assert Client._problem(response).request_id == "from-the-body"
    del response.headers["X-Request-ID"]
    response._content = b'{"type": "about:blank", "status": 502}'
    assert Client._problem(response).request_id is None
