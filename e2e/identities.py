"""The journeys' people (alice, bob, carol) and groups, as the cluster under test knows them.

Journeys speak of logical users and groups: alice is in premium-users, bob in free-users, carol in neither.
A cluster may call them differently (ServiceAccounts standing in as users are named
`system:serviceaccount:<ns>:<name>` and grouped by namespace), so each mode provides a token per user; the
suite asks the API server who each token belongs to (TokenReview, as maas-api and the gateway do), maps the
logical groups with `E2E_GROUPS`, and checks the memberships above before any journey runs.

Tokens never appear in reprs, logs or failure messages.
"""

from __future__ import annotations

import asyncio
import re
import shlex
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from maasctl.runtime import ApiError, Client

__all__ = ["CAST", "Identities", "Identity", "IdentityError", "StaticTokens", "TokenCommand", "TokenFile",
           "TokenSource", "parse_group_map", "resolve_identities"]

# Who is in which logical group; the journeys rely on exactly this.
CAST: Mapping[str, tuple[str, ...]] = {"alice": ("premium-users",), "bob": ("free-users",), "carol": ()}
LOGICAL_GROUPS = ("premium-users", "free-users")


class IdentityError(RuntimeError):
    """A token could not be obtained or does not belong to whom the journeys expect."""


class TokenSource(Protocol):
    """Where the token of a logical user comes from (the token hook)."""

    def describe(self) -> str: ...

    def token(self, user: str) -> str: ...


@dataclass(frozen=True)
class StaticTokens:
    """Tokens known in advance (the local control plane's token file)."""

    tokens: Mapping[str, str] = field(repr=False)
    origin: str = "the local control plane's token file"

    def describe(self) -> str:
        return self.origin

    def token(self, user: str) -> str:
        if user not in self.tokens:
            raise IdentityError(f"no token for {user} in {self.origin}")
        return self.tokens[user]


_TOKEN_LINE = re.compile(r"^\s*(?:export\s+)?([A-Za-z0-9_]+)_TOKEN=(.*)$")


@dataclass(frozen=True)
class TokenFile:
    """`E2E_TOKENS_FILE`: lines `[export ]<USER>_TOKEN=<token>`, the format of `maasctl dev`'s tokens.env."""

    path: Path

    def describe(self) -> str:
        return f"E2E_TOKENS_FILE {self.path}"

    def token(self, user: str) -> str:
        try:
            text = self.path.read_text()
        except OSError as exc:
            raise IdentityError(f"cannot read {self.describe()}: {exc.strerror}") from None
        for line in text.splitlines():
            match = _TOKEN_LINE.match(line)
            if match and match.group(1).lower() == user.lower():
                value = shlex.split(match.group(2))
                if len(value) == 1 and value[0] and not any(c.isspace() for c in value[0]):
                    return value[0]
        raise IdentityError(f"no {user.upper()}_TOKEN line in {self.describe()}")


@dataclass(frozen=True)
class TokenCommand:
    """`E2E_TOKEN_COMMAND`: a command (split like a shell would, run without one) that gets the user name as
    its last argument and prints the user's token on stdout, e.g. `kubectl create token -n users`."""

    argv: tuple[str, ...]
    timeout: float = 60.0

    @classmethod
    def parse(cls, command: str) -> TokenCommand:
        argv = tuple(shlex.split(command))
        if not argv:
            raise IdentityError("E2E_TOKEN_COMMAND is empty")
        return cls(argv)

    def describe(self) -> str:
        return f"E2E_TOKEN_COMMAND ({shlex.join(self.argv)})"

    def token(self, user: str) -> str:
        try:
            proc = subprocess.run([*self.argv, user], capture_output=True, text=True, timeout=self.timeout,
                                  stdin=subprocess.DEVNULL, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise IdentityError(f"{self.describe()} for {user} did not run: {exc}") from None
        # stderr is shown on failure (it explains it); stdout never is: it may hold a token.
        if proc.returncode != 0:
            raise IdentityError(f"{self.describe()} for {user} exited {proc.returncode}: {proc.stderr.strip()[-800:]}")
        lines = proc.stdout.split()
        if len(lines) != 1:
            raise IdentityError(f"{self.describe()} for {user} printed {len(lines)} words, expected one token")
        return lines[0]


@dataclass(frozen=True)
class Identity:
    """One logical user: the name the cluster gives the token's owner and its groups."""

    user: str
    username: str
    groups: tuple[str, ...]
    token: str = field(repr=False)


@dataclass(frozen=True)
class Identities:
    """Logical users and groups -> the cluster's; names outside the cast pass through unchanged."""

    people: Mapping[str, Identity]
    group_map: Mapping[str, str]

    def token(self, user: str) -> str:
        return self._person(user).token

    def username(self, user: str) -> str:
        return self._person(user).username if user in self.people else user

    def group(self, name: str) -> str:
        return self.group_map.get(name, name)

    def usernames(self, users: Iterable[str]) -> list[str]:
        return [self.username(u) for u in users]

    def groups(self, names: Iterable[str]) -> list[str]:
        return [self.group(g) for g in names]

    def _person(self, user: str) -> Identity:
        if user not in self.people:
            raise IdentityError(f"{user} is not one of the journeys' users ({', '.join(self.people)})")
        return self.people[user]


def parse_group_map(text: str) -> dict[str, str]:
    """`E2E_GROUPS`: `premium-users=<cluster group>,free-users=<cluster group>` (unlisted groups unchanged)."""
    out: dict[str, str] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        logical, sep, actual = item.partition("=")
        if not sep or not logical.strip() or not actual.strip():
            raise IdentityError(f"E2E_GROUPS entry {item!r} is not <group>=<cluster group>")
        if logical.strip() not in LOGICAL_GROUPS:
            raise IdentityError(f"E2E_GROUPS names {logical.strip()!r}; the journeys use {', '.join(LOGICAL_GROUPS)}")
        out[logical.strip()] = actual.strip()
    return out


async def _review(client: Client, token: str) -> tuple[str, tuple[str, ...]] | str:
    """(username, groups) of a token as the API server authenticates it, or why it does not."""
    try:
        review = await client.create({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                                      "spec": {"token": token}})
    except ApiError as exc:
        return f"TokenReview failed ({exc.status}): the suite's kubeconfig must allow creating tokenreviews"
    status = review.get("status") or {}
    if not status.get("authenticated"):
        return f"the API server does not accept it ({status.get('error') or 'not authenticated'})"
    user = status.get("user") or {}
    return str(user.get("username", "")), tuple(str(g) for g in user.get("groups") or ())


async def resolve_identities(client: Client, source: TokenSource, group_map: Mapping[str, str]) -> Identities:
    """Obtain every cast member's token, learn who it is, and check the memberships the journeys rely on."""
    people: dict[str, Identity] = {}
    problems: list[str] = []
    for user in CAST:
        try:
            token = await asyncio.to_thread(source.token, user)
        except IdentityError as exc:
            problems.append(str(exc))
            continue
        reviewed = await _review(client, token)
        if isinstance(reviewed, str):
            problems.append(f"the token of {user} from {source.describe()}: {reviewed}")
            continue
        people[user] = Identity(user, reviewed[0], reviewed[1], token)
    identities = Identities(people, dict(group_map))
    for user, person in people.items():
        for logical in LOGICAL_GROUPS:
            actual, member = identities.group(logical), identities.group(logical) in person.groups
            if member != (logical in CAST[user]):
                problems.append(f"{user} ({person.username}) must {'' if logical in CAST[user] else 'not '}be in "
                                f"{logical} (cluster group {actual}); the token's groups: {', '.join(person.groups)}")
    usernames = [p.username for p in people.values()]
    if len(set(usernames)) != len(usernames):
        problems.append(f"the users' tokens must belong to different people: {', '.join(usernames)}")
    if problems:
        raise IdentityError("the journeys' users are not set up as expected (docs/e2e.md, E2E_GROUPS):\n  "
                            + "\n  ".join(problems))
    return identities
