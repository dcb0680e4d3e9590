"""`Client` picks its actions once, at connect: done here, or asked of the API."""

from __future__ import annotations

from tether import Client, NatsConfig
from tether.client.actions import LocalActions
from tether.client.remote import RemoteActions
from tether.errors import NatsUnavailableError


async def test_actions_are_picked_at_connect_and_again_when_told(config: NatsConfig) -> None:
    async with Client(config) as local, Client(config, act_through_api=True) as remote:
        assert isinstance(local._actions, LocalActions)
        assert isinstance(remote._actions, RemoteActions)
        local.act_through_api = True
        assert isinstance(local._actions, RemoteActions)
    assert local._actions is None and remote._actions is None


async def test_a_remote_action_with_no_api_says_what_to_start(config: NatsConfig) -> None:
    async with Client(config, act_through_api=True) as remote:
        try:  # no API runs: no responders, at once
            await remote.cancel("nobody-answers")
        except NatsUnavailableError as exc:
            assert "tether dispatcher" in str(exc)
        else:
            raise AssertionError("no API runs: the cancel cannot have been answered")
