"""GET /api/v1/approvals: pagination, order, every filter, and full-text search."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from signoff.approvals import listing
from signoff.approvals.listing import paging
from signoff.common.time import utcnow
from signoff.context import AppContext
from tests.conftest import Member, Org, assert_error, create_approval, eventually
from tests.helpers import NO_SWEEP, backdate_expiry


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return NO_SWEEP


async def _list(client: httpx.AsyncClient, who: Member, **params: Any) -> dict[str, Any]:
    response = await client.get("/api/v1/approvals", params=params, headers=who.headers)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def _ids(body: dict[str, Any]) -> list[str]:
    return [item["id"] for item in body["data"]]


def _in_an_hour() -> str:
    return (datetime.now(UTC) + timedelta(hours=1)).isoformat()


# ---- pagination and order ----


async def test_pagination_and_newest_first(client: httpx.AsyncClient, org: Org) -> None:
    created = [(await create_approval(client, org.member, title=f"R{i}"))["id"] for i in range(5)]
    newest_first = created[::-1]

    first = await _list(client, org.member, page_size=2)
    assert first["pagination"] == {"page": 1, "page_size": 2, "total": 5, "total_pages": 3}
    assert first["total_is_exact"] is True
    assert (first["total"], first["page"], first["page_size"]) == (5, 1, 2)
    assert _ids(first) == newest_first[:2]

    second = await _list(client, org.member, page=2, page_size=2)
    assert _ids(second) == newest_first[2:4]
    last = await _list(client, org.member, page=3, page_size=2)
    assert _ids(last) == newest_first[4:]
    assert last["pagination"]["total_pages"] == 3
    beyond = await _list(client, org.member, page=4, page_size=2)
    assert beyond["data"] == [] and beyond["pagination"]["total"] == 5


READ_ONLY = ("steps", "votes", "receipt", "receipt_issued", "receipt_uses")


async def test_defaults_and_item_shape(client: httpx.AsyncClient, org: Org) -> None:
    for _ in range(21):
        await create_approval(client, org.member, metadata={"k": "v"})
    body = await _list(client, org.member)
    assert body["pagination"] == {"page": 1, "page_size": 20, "total": 21, "total_pages": 2}
    assert len(body["data"]) == 20
    item = body["data"][0]
    # decisions.md 13: items carry every field of the single read but callback_headers;
    # the read's chain, votes and receipt are its own.
    single = await client.get(f"/api/v1/approvals/{item['id']}", headers=org.member.headers)
    expected = {k: v for k, v in single.json().items() if k not in READ_ONLY}
    assert {k: item.get(k) for k in expected} == expected
    assert "callback_headers" not in item
    assert item["metadata"] == {"k": "v"}


async def test_empty_org_lists_nothing(client: httpx.AsyncClient, org: Org) -> None:
    body = await _list(client, org.member)
    assert body["data"] == []
    assert body["pagination"] == {"page": 1, "page_size": 20, "total": 0, "total_pages": 0}


async def test_limit_is_an_alias_of_page_size(client: httpx.AsyncClient, org: Org) -> None:
    for _ in range(3):
        await create_approval(client, org.member)
    body = await _list(client, org.member, limit=2)
    assert len(body["data"]) == 2
    assert body["page_size"] == 2 and body["pagination"]["total_pages"] == 2
    # page_size wins when both are given.
    assert len((await _list(client, org.member, limit=1, page_size=3))["data"]) == 3
    assert (await _list(client, org.member, page_size=100))["page_size"] == 100


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"page_size": 0}, "page_size"),
        ({"page_size": 101}, "page_size"),
        ({"page_size": -5}, "page_size"),
        ({"page_size": "ten"}, "page_size"),
        ({"limit": 0}, "page_size"),
        ({"limit": 101}, "page_size"),
        ({"page": 0}, "page"),
        ({"page": "x"}, "page"),
        ({"status": "done"}, "status"),
        ({"status": "pending,nope"}, "status"),
        ({"priority": "urgent"}, "priority"),
        ({"created_after": "yesterday"}, "created_after"),
        ({"created_before": "2030-01-01T00:00:00"}, "created_before"),
        ({"decided_after": "2030-13-01T00:00:00Z"}, "decided_after"),
    ],
)
async def test_invalid_parameters_are_400(
    client: httpx.AsyncClient, org: Org, params: dict[str, Any], field: str
) -> None:
    response = await client.get("/api/v1/approvals", params=params, headers=org.member.headers)
    details = assert_error(response, 400, "VALIDATION_ERROR")
    assert field in [f["field"] for f in details["fields"]], details


async def test_unknown_query_parameters_are_ignored(client: httpx.AsyncClient, org: Org) -> None:
    await create_approval(client, org.member)
    body = await _list(client, org.member, sort="asc", per_page=1, expand="steps", foo="")
    assert body["pagination"]["total"] == 1


async def test_other_orgs_requests_never_appear(
    client: httpx.AsyncClient, org: Org, other_org: Org
) -> None:
    ours = await create_approval(client, org.member, title="Deploy ours")
    await create_approval(client, other_org.member, title="Deploy theirs")
    assert _ids(await _list(client, org.admin)) == [ours["id"]]
    assert _ids(await _list(client, org.admin, search="deploy")) == [ours["id"]]
    assert (await _list(client, other_org.member, status="pending"))["total"] == 1


# ---- filters ----


async def _one_of_each_status(
    client: httpx.AsyncClient, org: Org, ctx: AppContext
) -> dict[str, str]:
    ids = {
        status: (await create_approval(client, org.member, title=status))["id"]
        for status in ("pending", "approved", "rejected", "cancelled", "expired")
    }
    base = "/api/v1/approvals/"
    headers = org.admin.headers
    await client.patch(base + ids["approved"], headers=headers, json={"decision": "approve"})
    await client.patch(base + ids["rejected"], headers=headers, json={"decision": "reject"})
    await client.delete(base + ids["cancelled"], headers=headers)
    # Past its deadline, not yet swept (the sweep is off in this module).
    await backdate_expiry(ctx, ids["expired"])
    return ids


async def test_status_filter(client: httpx.AsyncClient, org: Org, ctx: AppContext) -> None:
    ids = await _one_of_each_status(client, org, ctx)
    for status, request_id in ids.items():
        body = await _list(client, org.member, status=status)
        assert _ids(body) == [request_id], status
        assert body["data"][0]["status"] == status
        assert body["total"] == 1


async def test_status_accepts_a_comma_list_and_repeats(
    client: httpx.AsyncClient, org: Org, ctx: AppContext
) -> None:
    ids = await _one_of_each_status(client, org, ctx)
    body = await _list(client, org.member, status="approved, rejected")
    assert set(_ids(body)) == {ids["approved"], ids["rejected"]}
    assert body["total"] == 2
    repeated = await client.get(
        "/api/v1/approvals?status=cancelled&status=expired", headers=org.member.headers
    )
    assert set(_ids(repeated.json())) == {ids["cancelled"], ids["expired"]}
    everything = await _list(client, org.member, status="pending,expired,approved")
    assert everything["total"] == 3


async def test_expired_but_unswept_counts_as_expired_not_pending(
    client: httpx.AsyncClient, org: Org, ctx: AppContext
) -> None:
    live = await create_approval(client, org.member, expires_at=_in_an_hour())
    stale = await create_approval(client, org.member, expires_at=_in_an_hour())
    deadline = await backdate_expiry(ctx, stale["id"])
    assert _ids(await _list(client, org.member, status="pending")) == [live["id"]]
    expired = await _list(client, org.member, status="expired")
    assert _ids(expired) == [stale["id"]]
    item = expired["data"][0]
    assert item["status"] == "expired"
    assert item["decided_at"] == item["expires_at"]
    assert item["decided_at"] == deadline.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    # Unfiltered, it reads expired too.
    statuses = {i["id"]: i["status"] for i in (await _list(client, org.member))["data"]}
    assert statuses == {live["id"]: "pending", stale["id"]: "expired"}


async def test_priority_action_type_and_source_filters(client: httpx.AsyncClient, org: Org) -> None:
    low = await create_approval(client, org.member, priority="low", source="zapier")
    deploy = await create_approval(
        client, org.member, priority="critical", action_type="deploy.prod", source="github"
    )
    other = await create_approval(client, org.member, priority="critical", action_type="refund")
    assert _ids(await _list(client, org.member, priority="low")) == [low["id"]]
    assert _ids(await _list(client, org.member, priority="critical")) == [other["id"], deploy["id"]]
    assert _ids(await _list(client, org.member, priority="high")) == []
    assert _ids(await _list(client, org.member, action_type="deploy.prod")) == [deploy["id"]]
    # An exact label, not a prefix.
    assert _ids(await _list(client, org.member, action_type="deploy")) == []
    assert _ids(await _list(client, org.member, source="zapier")) == [low["id"]]
    combined = await _list(client, org.member, priority="critical", source="github")
    assert _ids(combined) == [deploy["id"]]


async def _in_a_later_millisecond() -> None:
    """Wait past the current millisecond. Answers show times to the millisecond, and
    these tests build their windows from shown times: on a fast machine two calls in a
    row can land in one millisecond, and then no shown time falls between them."""
    shown = utcnow()
    await eventually(lambda: utcnow() != shown, "the next millisecond")


async def _created_apart(client: httpx.AsyncClient, member: Member) -> dict[str, Any]:
    await _in_a_later_millisecond()
    return await create_approval(client, member)


async def test_created_after_and_before(client: httpx.AsyncClient, org: Org) -> None:
    first, second, third = [await _created_apart(client, org.member) for _ in range(3)]
    middle = second["created_at"]
    # A half-open window: after is inclusive, before exclusive, so windows never overlap.
    assert _ids(await _list(client, org.member, created_after=middle)) == [
        third["id"],
        second["id"],
    ]
    assert _ids(await _list(client, org.member, created_before=middle)) == [first["id"]]
    window = await _list(
        client, org.member, created_after=first["created_at"], created_before=third["created_at"]
    )
    assert _ids(window) == [second["id"], first["id"]]
    # Other offsets than Z mean the same instant.
    as_plus_two = (
        datetime.fromisoformat(middle).astimezone(timezone(timedelta(hours=2))).isoformat()
    )
    assert _ids(await _list(client, org.member, created_after=as_plus_two)) == [
        third["id"],
        second["id"],
    ]


async def test_decided_after_and_before(
    client: httpx.AsyncClient, org: Org, ctx: AppContext
) -> None:
    pending = await create_approval(client, org.member)
    early = await create_approval(client, org.member)
    late = await create_approval(client, org.member)
    base = "/api/v1/approvals/"
    first = await client.patch(
        base + early["id"], headers=org.admin.headers, json={"decision": "approve"}
    )
    await _in_a_later_millisecond()
    second = await client.delete(base + late["id"], headers=org.admin.headers)
    boundary = second.json()["decided_at"]
    assert first.json()["decided_at"] < boundary
    assert _ids(await _list(client, org.member, decided_after=boundary)) == [late["id"]]
    assert _ids(await _list(client, org.member, decided_before=boundary)) == [early["id"]]
    everything_decided = await _list(client, org.member, decided_after="2000-01-01T00:00:00Z")
    assert pending["id"] not in _ids(everything_decided)
    assert everything_decided["total"] == 2


async def test_decided_filters_see_expiry_before_the_sweep(
    client: httpx.AsyncClient, org: Org, ctx: AppContext
) -> None:
    """An unswept expired request reads decided at its deadline, so filters agree."""
    stale = await create_approval(client, org.member, expires_at=_in_an_hour())
    deadline = await backdate_expiry(ctx, stale["id"], ago=timedelta(minutes=10))
    before = (deadline - timedelta(minutes=1)).isoformat()
    after = (deadline + timedelta(minutes=1)).isoformat()
    assert _ids(await _list(client, org.member, decided_after=before)) == [stale["id"]]
    assert _ids(await _list(client, org.member, decided_before=after)) == [stale["id"]]
    assert _ids(await _list(client, org.member, decided_after=after)) == []
    assert _ids(await _list(client, org.member, decided_before=before)) == []


async def test_decided_window_keeps_to_the_org_and_combines_with_filters(
    client: httpx.AsyncClient, org: Org, other_org: Org, ctx: AppContext
) -> None:
    """Both ways into the window (a decision, a deadline passed unswept) stay within the
    org, and other filters narrow what the window chose."""

    async def decided_and_expired(who: Member, admin: Member) -> tuple[str, str]:
        approved = await create_approval(client, who, priority="high")
        await client.patch(
            f"/api/v1/approvals/{approved['id']}",
            headers=admin.headers,
            json={"decision": "approve"},
        )
        stale = await create_approval(client, who, priority="low", expires_at=_in_an_hour())
        await backdate_expiry(ctx, stale["id"])
        return approved["id"], stale["id"]

    ours = await decided_and_expired(org.member, org.admin)
    theirs = await decided_and_expired(other_org.member, other_org.admin)
    await create_approval(client, org.member, priority="low")  # pending: never in a window
    window = {"decided_after": "2000-01-01T00:00:00Z", "decided_before": _in_an_hour()}

    ours_listed = await _list(client, org.member, **window)
    assert sorted(_ids(ours_listed)) == sorted(ours) and ours_listed["total"] == 2
    theirs_listed = await _list(client, other_org.member, **window)
    assert sorted(_ids(theirs_listed)) == sorted(theirs) and theirs_listed["total"] == 2
    low = await _list(client, org.member, priority="low", **window)
    assert _ids(low) == [ours[1]] and low["total"] == 1
    approved = await _list(client, org.member, status="approved", **window)
    assert _ids(approved) == [ours[0]] and approved["total"] == 1


# ---- full-text search ----


async def test_search_prefix_and_every_word(client: httpx.AsyncClient, org: Org) -> None:
    deploy = await create_approval(
        client, org.member, title="Deploy billing service", description="Roll out to eu-west."
    )
    refund = await create_approval(
        client, org.member, title="Refund customer", description="Billing error on invoice 4411."
    )
    await create_approval(client, org.member, title="Rotate keys", description="Quarterly chore.")
    assert set(_ids(await _list(client, org.member, search="billing"))) == {
        deploy["id"],
        refund["id"],
    }
    # Prefixes match, case does not matter.
    assert _ids(await _list(client, org.member, search="DEPL")) == [deploy["id"]]
    assert _ids(await _list(client, org.member, search="invoi")) == [refund["id"]]
    # Every word must match (in title or description).
    assert _ids(await _list(client, org.member, search="billing refund")) == [refund["id"]]
    assert _ids(await _list(client, org.member, search="billing invoice 4411")) == [refund["id"]]
    assert _ids(await _list(client, org.member, search="billing quarterly")) == []
    assert _ids(await _list(client, org.member, search="nothing-like-this")) == []


async def test_search_finds_every_longer_word_of_a_prefix_however_many(
    client: httpx.AsyncClient, org: Org
) -> None:
    """On SQLite a prefix with few longer words in the index is searched as those words,
    one with many as a prefix (listing.search.sqlite_word_forms): both find every request with
    a word the term is a prefix of, and no other."""
    few = [
        await create_approval(client, org.member, title=f"Rotate {word}")
        for word in ("key", "keys", "keyring")
    ]
    many = [
        await create_approval(client, org.member, title=f"Shard {word}")
        for word in ("node", *(f"node{i}" for i in range(12)))
    ]
    await create_approval(client, org.member, title="Monkey business")  # "key" inside a word
    cases = [("key", few), ("keyr", few[2:]), ("node", many), ("node1", [many[2], *many[11:]])]
    for term, expected in cases:
        body = await _list(client, org.member, search=term, page_size=50)
        assert sorted(_ids(body)) == sorted(r["id"] for r in expected), term


async def test_search_ranks_title_matches_over_description_matches(
    client: httpx.AsyncClient, org: Org
) -> None:
    in_title = await create_approval(
        client, org.member, title="Firewall change", description="Opens port 443 on the edge."
    )
    # Created later (newest first would list it first), and its description is as short.
    in_description = await create_approval(
        client, org.member, title="Open port 443", description="Firewall change on the edge."
    )
    body = await _list(client, org.member, search="firewall")
    assert _ids(body) == [in_title["id"], in_description["id"]]
    # The same holds when more unrelated requests exist.
    for i in range(3):
        await create_approval(client, org.member, title=f"Noise {i}", description="Unrelated.")
    assert _ids(await _list(client, org.member, search="firewall")) == [
        in_title["id"],
        in_description["id"],
    ]


async def test_search_total_counts_every_match(client: httpx.AsyncClient, org: Org) -> None:
    created = []
    for i in range(7):
        created.append(await create_approval(client, org.member, title=f"Payout batch {i}"))
        await _in_a_later_millisecond()
    await create_approval(client, org.member, title="Something else")
    body = await _list(client, org.member, search="payout", page_size=3, page=3)
    assert body["pagination"] == {"page": 3, "page_size": 3, "total": 7, "total_pages": 3}
    assert len(body["data"]) == 1
    pages = [
        await _list(client, org.member, search="payout", page_size=3, page=p) for p in (1, 2, 3)
    ]
    seen = [i for page in pages for i in _ids(page)]
    # Equally good matches: newest first, across pages.
    assert seen == [request["id"] for request in reversed(created)]


async def test_a_search_of_many_matches_lists_them_newest_first(
    client: httpx.AsyncClient, org: Org, other_org: Org, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past SEARCH_RANKED_UP_TO matches (lowered here to 3) a search is not ranked: its
    matches come newest first, pages neither repeat nor skip one, every row matches, and
    the total reads the bound. Alone, and beside a filter (SQLite reads the two
    differently). At or under the bound, the best match still comes first."""
    monkeypatch.setattr(paging, "SEARCH_RANKED_UP_TO", 3)
    listing.page_queries.cache_clear()
    try:
        best = await create_approval(
            client, org.member, title="Firewall change", description="Edge.", priority="high"
        )
        later = []
        for i in range(4):
            await _in_a_later_millisecond()
            later.append(
                await create_approval(
                    client,
                    org.member,
                    title=f"Port {i}",
                    description="A firewall rule.",
                    priority="high" if i < 3 else "low",
                )
            )
            await create_approval(client, org.member, title=f"Noise {i}", priority="high")
            await create_approval(client, other_org.member, title=f"Firewall {i}")
        newest_first = [r["id"] for r in reversed(later)] + [best["id"]]
        high = [r["id"] for r in reversed(later[:3])] + [best["id"]]
        for params, expected in (({}, newest_first), ({"priority": "high"}, high)):
            pages = [
                await _list(client, org.member, search="firewall", page_size=2, page=p, **params)
                for p in (1, 2, 3)
            ]
            assert [i for page in pages for i in _ids(page)] == expected, params
            assert (pages[0]["total"], pages[0]["total_is_exact"]) == (3, False), params
        # Three matches: ranked, the title's match first although it is the oldest.
        body = await _list(client, org.member, search="firewall", priority="high", source="x")
        assert _ids(body) == []
        for cancelled in later[:2]:
            await client.delete(f"/api/v1/approvals/{cancelled['id']}", headers=org.member.headers)
        body = await _list(client, org.member, search="firewall", status="pending")
        assert _ids(body)[0] == best["id"]
        assert (body["total"], body["total_is_exact"]) == (3, True)
    finally:
        listing.page_queries.cache_clear()


async def test_search_combines_with_filters(client: httpx.AsyncClient, org: Org) -> None:
    high = await create_approval(client, org.member, title="Payout to vendor", priority="high")
    await create_approval(client, org.member, title="Payout to partner", priority="low")
    body = await _list(client, org.member, search="payout", priority="high")
    assert _ids(body) == [high["id"]] and body["total"] == 1
    await client.delete(f"/api/v1/approvals/{high['id']}", headers=org.member.headers)
    assert (await _list(client, org.member, search="payout", status="pending"))["total"] == 1


async def test_search_finds_only_the_callers_org(
    client: httpx.AsyncClient, org: Org, other_org: Org
) -> None:
    ours = await create_approval(client, org.member, title="Rotate vendor keys")
    theirs = [
        await create_approval(client, other_org.member, title="Rotate vendor keys")
        for _ in range(3)
    ]
    body = await _list(client, org.member, search="rotate vendor")
    assert _ids(body) == [ours["id"]] and body["total"] == 1
    body = await _list(client, other_org.member, search="rotate", priority="high")
    assert sorted(_ids(body)) == sorted(request["id"] for request in theirs)
    assert body["total"] == 3
    # SQLite's search index keeps each request's org id beside its words (to find an
    # org's matches alone), but an org id is no word of a request.
    for words in (org.id.replace("-", ""), other_org.id.replace("-", "")[:8]):
        assert (await _list(client, org.member, search=words))["total"] == 0, words


OPERATOR_QUERIES = [
    '"',
    "*",
    ":",
    "&",
    ")",
    "deploy | !prod",
    "NOT deploy",
    "deploy OR prod",
    "title:deploy",
    "deploy NEAR prod",
    "^deploy",
    "'",
    "\\",
    "déploiement",
    "部署",
    "a" * 500,
]
# The operators are dropped; the words around them still search.
OPERATOR_QUERIES_THAT_MATCH = [
    '"deploy',
    "deploy*",
    "deploy:*",
    "deploy & prod",
    "(deploy",
    "-deploy",
]


async def test_search_operator_characters_do_not_error(client: httpx.AsyncClient, org: Org) -> None:
    deploy = await create_approval(client, org.member, title="Deploy prod", description="Now.")
    for query in OPERATOR_QUERIES + OPERATOR_QUERIES_THAT_MATCH:
        response = await client.get(
            "/api/v1/approvals", params={"search": query}, headers=org.member.headers
        )
        assert response.status_code == 200, (query, response.text)
        found = _ids(response.json())
        assert found in ([], [deploy["id"]]), query
        if query in OPERATOR_QUERIES_THAT_MATCH:
            assert found == [deploy["id"]], query


async def test_search_finds_dotted_and_hyphenated_words(
    client: httpx.AsyncClient, org: Org
) -> None:
    """Words inside host names, versions, labels and e-mails are searchable on both engines."""
    request = await create_approval(
        client,
        org.member,
        title="Renew api.example.com certificate",
        description="For deploy.production of billing-service v2.1, ask ops@example.org.",
    )
    for query in (
        "api.example.com",
        "example",
        "certificate",
        "deploy.production",
        "production",
        "billing-service",
        "service",
        "v2.1",
        "ops@example.org",
        "ops",
    ):
        assert _ids(await _list(client, org.member, search=query)) == [request["id"]], query


async def test_search_of_only_operators_finds_nothing(client: httpx.AsyncClient, org: Org) -> None:
    await create_approval(client, org.member)
    body = await _list(client, org.member, search='"*:&()')
    assert body["data"] == [] and body["total"] == 0


async def test_an_unencoded_plus_offset_is_read_as_meant(
    client: httpx.AsyncClient, org: Org
) -> None:
    await create_approval(client, org.member)
    # "+01:00" typed into a URL unencoded arrives as " 01:00".
    raw = "/api/v1/approvals?created_after=2000-01-01T00:00:00+01:00"
    response = await client.get(raw, headers=org.member.headers)
    assert response.status_code == 200, response.text
    assert response.json()["total"] == 1


async def test_the_unfiltered_total_counts_each_org_once_per_request(
    client: httpx.AsyncClient, org: Org, other_org: Org
) -> None:
    for index in range(3):
        await create_approval(client, org.member, idempotency_key=f"k{index}")
    replay = await client.post(
        "/api/v1/approvals",
        json={"title": "again", "description": "d", "priority": "low", "idempotency_key": "k0"},
        headers=org.member.headers,
    )
    assert replay.status_code == 200  # a replay creates nothing, so counts nothing
    await create_approval(client, other_org.member)

    assert (await _list(client, org.member))["total"] == 3
    assert (await _list(client, org.admin))["total"] == 3
    assert (await _list(client, other_org.member))["total"] == 1
    filtered = await _list(client, org.member, status="pending", priority="high")
    assert filtered["total"] == 3


# Copies of every stored request, written by one statement as a bulk import would.
_COPY_EVERY_REQUEST = (
    "INSERT INTO approval_requests (id, org_id, connection_id, title, description, status, "
    "priority, metadata, required_approvals, current_approvals, is_sequential, created_at, "
    "updated_at, comments_count, has_steps, auto_approved, number) "
    "SELECT {new_id}, org_id, connection_id, title || ' (copy)', description, status, "
    "priority, metadata, required_approvals, current_approvals, is_sequential, created_at, "
    "updated_at, comments_count, has_steps, auto_approved, number + 1000 FROM approval_requests"
)


async def test_the_unfiltered_total_follows_every_write_to_the_requests(
    client: httpx.AsyncClient, ctx: AppContext, org: Org, other_org: Org, backend: str
) -> None:
    """The unfiltered total is kept by triggers, not counted (migrations 0005 and 0018):
    it stays exact for creates made at once, rows written or deleted many per statement
    (an import, retention), and a write rolled back."""

    async def totals() -> tuple[int, int]:
        ours, theirs = await _list(client, org.member), await _list(client, other_org.member)
        return ours["total"], theirs["total"]

    await asyncio.gather(
        *(create_approval(client, org.member, title=f"Together {i}") for i in range(12))
    )
    await create_approval(client, other_org.member, title="Theirs")
    assert await totals() == (12, 1)

    new_id = "gen_random_uuid()" if backend == "postgres" else "lower(hex(randomblob(16)))"
    async with ctx.transaction() as uow:
        await uow.session.execute(text(_COPY_EVERY_REQUEST.format(new_id=new_id)))
    assert await totals() == (24, 2)

    async with ctx.transaction() as uow:
        await uow.session.execute(text("DELETE FROM approval_requests WHERE title LIKE '%(copy)'"))
    assert await totals() == (12, 1)

    with pytest.raises(RuntimeError):
        async with ctx.transaction() as uow:
            await uow.session.execute(text(_COPY_EVERY_REQUEST.format(new_id=new_id)))
            raise RuntimeError("rolled back")
    assert await totals() == (12, 1)
    filtered = await _list(client, org.member, status="pending")
    assert filtered["total"] == 12


async def test_search_ignores_accents_both_ways(client: httpx.AsyncClient, org: Org) -> None:
    """As SQLite's index folds accents, so does PostgreSQL's (migration 0011)."""
    accented = await create_approval(
        client, org.member, title="Déploiement de la facturation", description="Équipe café."
    )
    plain = await create_approval(
        client, org.member, title="Deploiement du paiement", description="Equipe cafe."
    )
    both = {accented["id"], plain["id"]}
    for query in ("deploiement", "déploiement", "DÉPLOIE", "equipe", "équipe café", "cafe"):
        assert set(_ids(await _list(client, org.member, search=query))) == both, query
    assert _ids(await _list(client, org.member, search="facturation")) == [accented["id"]]


# ---- cursors and bounded totals ----


async def test_cursor_pages_walk_every_request_once_in_list_order(
    client: httpx.AsyncClient, org: Org
) -> None:
    created = [(await create_approval(client, org.member, title=f"C{i}"))["id"] for i in range(7)]
    seen: list[str] = []
    body = await _list(client, org.member, page_size=3)
    pages = 1
    while True:
        seen += _ids(body)
        # The total counts the filters' matches now, arrivals included.
        assert body["total"] == 7 + pages - 1 and body["total_is_exact"] is True
        if body["next_cursor"] is None:
            break
        # A request created meanwhile is newer: it belongs before the cursor, not after.
        await create_approval(client, org.member, title="Arrived meanwhile")
        body = await _list(client, org.member, page_size=3, cursor=body["next_cursor"])
        pages += 1
    assert seen == created[::-1]
    assert pages == 3  # 3 + 3 + 1: the last page is not full, so it has no cursor


async def test_cursor_keeps_the_filters_and_breaks_ties_by_id(
    client: httpx.AsyncClient, ctx: AppContext, org: Org
) -> None:
    ids = [(await create_approval(client, org.member, priority=p))["id"] for p in ["high"] * 5]
    await create_approval(client, org.member, priority="low")
    # All five at one instant: the order within it is by id, newest (largest) first.
    async with ctx.transaction() as uow:
        await uow.session.execute(
            text("UPDATE approval_requests SET created_at = :at WHERE priority = 'high'"),
            {"at": datetime(2026, 1, 1, tzinfo=UTC)},
        )
    first = await _list(client, org.member, page_size=2, priority="high")
    second = await _list(
        client, org.member, page_size=2, priority="high", cursor=first["next_cursor"]
    )
    third = await _list(
        client, org.member, page_size=2, priority="high", cursor=second["next_cursor"]
    )
    assert _ids(first) + _ids(second) + _ids(third) == sorted(ids, reverse=True)
    assert third["next_cursor"] is None


@pytest.mark.parametrize(
    "params",
    [
        {"cursor": "not-a-cursor"},
        {"cursor": "01a2133e-5ba5-70f5-819c-36ae8deb5076", "page": "2"},
        {"cursor": "01a2133e-5ba5-70f5-819c-36ae8deb5076", "search": "deploy"},
    ],
)
async def test_a_cursor_that_cannot_apply_is_400_naming_it(
    client: httpx.AsyncClient, org: Org, params: dict[str, str]
) -> None:
    response = await client.get("/api/v1/approvals", params=params, headers=org.member.headers)
    body = assert_error(response, 400, "VALIDATION_ERROR")
    assert "cursor" in str(body)


async def test_another_orgs_request_as_cursor_gives_an_empty_page(
    client: httpx.AsyncClient, org: Org, other_org: Org
) -> None:
    await create_approval(client, org.member)
    theirs = await create_approval(client, other_org.member)
    body = await _list(client, org.member, cursor=theirs["id"])
    assert body["data"] == [] and body["next_cursor"] is None


async def test_total_is_exact_up_to_the_bound_then_says_there_are_more(
    client: httpx.AsyncClient, org: Org, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counting stops one past TOTAL_EXACT_UP_TO (lowered here to 3): the total reads the
    bound and says it is not exact, on filtered, searched and unfiltered pages alike."""
    monkeypatch.setattr(paging, "TOTAL_EXACT_UP_TO", 3)
    listing.page_queries.cache_clear()
    try:
        for i in range(3):
            await create_approval(client, org.member, title=f"Deploy {i}", priority="high")
        for params in ({}, {"priority": "high"}, {"search": "deploy"}):
            body = await _list(client, org.member, **params)
            assert (body["total"], body["total_is_exact"]) == (3, True), params
        await create_approval(client, org.member, title="Deploy 4", priority="high")
        for params in ({}, {"priority": "high"}, {"search": "deploy"}, {"status": "pending"}):
            body = await _list(client, org.member, page_size=2, **params)
            assert (body["total"], body["total_is_exact"]) == (3, False), params
            assert body["pagination"]["total_pages"] == 2
            assert len(body["data"]) == 2
    finally:
        listing.page_queries.cache_clear()
