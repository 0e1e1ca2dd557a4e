"""The inbox's rows: messages between agents, and the conditional updates that make a delivery
happen exactly once (`claim`). Methods of the Store (a mixin): each one is one transaction, run
on the store thread by `Store.run`.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from ..models import InboxMessage, MessageStatus
from .schema import inbox_messages
from .stamps import utc_now


class InboxRows:
    engine: sa.Engine

    def add_message(self, sender_id: str, receiver_id: str, message: str) -> InboxMessage:
        now = utc_now()
        with self.engine.begin() as conn:
            result = conn.execute(
                inbox_messages.insert().values(
                    sender_id=sender_id,
                    receiver_id=receiver_id,
                    message=message,
                    status=MessageStatus.PENDING.value,
                    created_at=now,
                )
            )
            msg_id = result.inserted_primary_key[0]  # type: ignore[index]  # an insert has a key
        return InboxMessage(msg_id, sender_id, receiver_id, message, MessageStatus.PENDING, now)

    def get_message(self, message_id: int) -> InboxMessage | None:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(inbox_messages).where(inbox_messages.c.id == message_id)).mappings().first()
        return _message(row) if row else None

    def list_messages(self, receiver_id: str, status: MessageStatus | None, limit: int) -> list[InboxMessage]:
        query = (
            sa.select(inbox_messages)
            .where(inbox_messages.c.receiver_id == receiver_id)
            .order_by(inbox_messages.c.id)
            .limit(limit)
        )
        if status is not None:
            query = query.where(inbox_messages.c.status == status.value)
        with self.engine.connect() as conn:
            return [_message(r) for r in conn.execute(query).mappings()]

    def receivers_with_pending(self) -> list[str]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(inbox_messages.c.receiver_id)
                .distinct()
                .where(inbox_messages.c.status == MessageStatus.PENDING.value)
            )
            return [r.receiver_id for r in rows]

    def pending_counts(self) -> dict[str, int]:
        """Pending messages per receiver (receivers with none are absent)."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(inbox_messages.c.receiver_id, sa.func.count())
                .where(inbox_messages.c.status == MessageStatus.PENDING.value)
                .group_by(inbox_messages.c.receiver_id)
            )
            return {r[0]: int(r[1]) for r in rows}

    def next_pending(self, receiver_id: str) -> InboxMessage | None:
        """The receiver's oldest pending message, unless an earlier one's fate is still open
        (DELIVERING after a crash): order first."""
        with self.engine.connect() as conn:
            in_flight = conn.execute(
                sa.select(inbox_messages.c.id)
                .where(
                    inbox_messages.c.receiver_id == receiver_id,
                    inbox_messages.c.status == MessageStatus.DELIVERING.value,
                )
                .limit(1)
            ).first()
            if in_flight is not None:
                return None
            row = (
                conn.execute(
                    sa.select(inbox_messages)
                    .where(
                        inbox_messages.c.receiver_id == receiver_id,
                        inbox_messages.c.status == MessageStatus.PENDING.value,
                    )
                    .order_by(inbox_messages.c.id)
                    .limit(1)
                )
                .mappings()
                .first()
            )
        return _message(row) if row is not None else None

    def claim(self, msg: InboxMessage, paste_mark: str | None) -> bool:
        """Move a pending message to DELIVERING, recording where its paste lands.

        The conditional UPDATE is the exactly-once gate: of any number of racing
        deliverers, only the one whose UPDATE changes the row may paste it.
        """
        with self.engine.begin() as conn:
            changed = conn.execute(
                inbox_messages.update()
                .where(inbox_messages.c.id == msg.id, inbox_messages.c.status == MessageStatus.PENDING.value)
                .values(status=MessageStatus.DELIVERING.value, claimed_at=utc_now(), paste_mark=paste_mark)
            ).rowcount
        if changed == 1:
            msg.status, msg.paste_mark = MessageStatus.DELIVERING, paste_mark
        return changed == 1

    def finish_message(self, message_id: int, status: MessageStatus, error: str | None = None) -> None:
        values: dict[str, Any] = {"status": status.value, "error": error}
        if status == MessageStatus.DELIVERED:
            values["delivered_at"] = utc_now()
        if status == MessageStatus.PENDING:
            values["paste_mark"] = None
        with self.engine.begin() as conn:
            conn.execute(inbox_messages.update().where(inbox_messages.c.id == message_id).values(**values))

    def messages_in_status(self, status: MessageStatus) -> list[InboxMessage]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(inbox_messages).where(inbox_messages.c.status == status.value).order_by(inbox_messages.c.id)
            ).mappings()
            return [_message(r) for r in rows]

    def fail_pending_for(self, receiver_id: str, reason: str) -> list[InboxMessage]:
        """Mark every undelivered message to a vanished receiver as failed; return them."""
        with self.engine.begin() as conn:
            rows = list(
                conn.execute(
                    sa.select(inbox_messages).where(
                        inbox_messages.c.receiver_id == receiver_id,
                        inbox_messages.c.status.in_([MessageStatus.PENDING.value, MessageStatus.DELIVERING.value]),
                    )
                ).mappings()
            )
            if rows:
                conn.execute(
                    inbox_messages.update()
                    .where(inbox_messages.c.id.in_([r["id"] for r in rows]))
                    .values(status=MessageStatus.FAILED.value, error=reason)
                )
        out = [_message(r) for r in rows]
        for msg in out:
            msg.status, msg.error = MessageStatus.FAILED, reason
        return out


def _message(row: Any) -> InboxMessage:
    return InboxMessage(
        id=row["id"],
        sender_id=row["sender_id"],
        receiver_id=row["receiver_id"],
        message=row["message"],
        status=MessageStatus(row["status"]),
        created_at=row["created_at"],
        delivered_at=row["delivered_at"],
        error=row["error"],
        paste_mark=row["paste_mark"],
    )
