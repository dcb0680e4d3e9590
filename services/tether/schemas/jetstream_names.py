"""JetStream's own names: a KV bucket's stream and subjects, and the API's subjects."""

from __future__ import annotations


class JetStreamNames:
    """Part of `Names` (`tether.schemas.names`): the names JetStream gives, not Tether."""

    __slots__ = ()

    @staticmethod
    def kv_stream(bucket: str) -> str:
        return f"KV_{bucket}"

    @staticmethod
    def kv_subject(bucket: str, key: str = "") -> str:
        """`$KV.<bucket>.<key>`: the subject a key's values are stored under."""
        return f"$KV.{bucket}.{key}"

    @staticmethod
    def direct_get_subject(stream: str, subject: str) -> str:
        """The last message on `subject` in `stream`, without a consumer (allow_direct)."""
        return f"$JS.API.DIRECT.GET.{stream}.{subject}"

    @staticmethod
    def stream_info_subject(stream: str) -> str:
        return f"$JS.API.STREAM.INFO.{stream}"

    @staticmethod
    def direct_batch_subject(stream: str) -> str:
        """Batched direct gets of `stream` (the request's body names the filter)."""
        return f"$JS.API.DIRECT.GET.{stream}"

    @staticmethod
    def message_get_subject(stream: str) -> str:
        return f"$JS.API.STREAM.MSG.GET.{stream}"

    @staticmethod
    def message_delete_subject(stream: str) -> str:
        return f"$JS.API.STREAM.MSG.DELETE.{stream}"

    @staticmethod
    def consumer_info_subject(stream: str, durable: str) -> str:
        return f"$JS.API.CONSUMER.INFO.{stream}.{durable}"
