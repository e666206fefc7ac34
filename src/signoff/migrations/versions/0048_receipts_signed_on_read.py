"""Receipts are signed on read: their rows keep the claims, not the token

Revision ID: 0048
Revises: 0047
Create Date: 2026-11-28

A decision no longer signs its receipt: the row keeps the claims (``issuer``,
``action_type``, ``arguments_hash``, ``preview_hash``, ``decided_by`` beside the ``jti``,
``kid`` and times it had), and each read signs them with the key ``kid`` names
(docs/decisions/0033-receipt-signed-on-read.md). ``token_encrypted`` goes.

A migration has no secret key, so the tokens stored before cannot be opened to read their
approvers: each is kept, still encrypted, in ``stored_receipt_tokens`` and served from
there (its row's claim columns stay null). Going back puts those tokens back in their
rows; a receipt signed on read has no token to put back without the secret key, so its
row goes (it can no longer be shown nor redeemed: it fails closed).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from signoff.models.base import JSONType

revision = "0048"
down_revision = "0047"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("receipts") as batch:
        batch.add_column(sa.Column("issuer", sa.Text(), nullable=True))
        batch.add_column(sa.Column("action_type", sa.Text(), nullable=True))
        batch.add_column(sa.Column("arguments_hash", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("preview_hash", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("decided_by", JSONType, nullable=True))
    op.create_table(
        "stored_receipt_tokens",
        sa.Column("jti", sa.Uuid(), nullable=False),
        sa.Column("token_encrypted", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["jti"],
            ["receipts.jti"],
            name=op.f("fk_stored_receipt_tokens_jti_receipts"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("jti", name=op.f("pk_stored_receipt_tokens")),
    )
    op.execute(
        "INSERT INTO stored_receipt_tokens (jti, token_encrypted) "
        "SELECT jti, token_encrypted FROM receipts"
    )
    with op.batch_alter_table("receipts") as batch:
        batch.drop_column("token_encrypted")


def downgrade() -> None:
    op.execute("DELETE FROM receipts WHERE jti NOT IN (SELECT jti FROM stored_receipt_tokens)")
    with op.batch_alter_table("receipts") as batch:
        batch.add_column(sa.Column("token_encrypted", sa.Text(), nullable=True))
    op.execute(
        "UPDATE receipts SET token_encrypted = (SELECT s.token_encrypted "
        "FROM stored_receipt_tokens s WHERE s.jti = receipts.jti)"
    )
    op.drop_table("stored_receipt_tokens")
    with op.batch_alter_table("receipts") as batch:
        batch.alter_column("token_encrypted", existing_type=sa.Text(), nullable=False)
        batch.drop_column("decided_by")
        batch.drop_column("preview_hash")
        batch.drop_column("arguments_hash")
        batch.drop_column("action_type")
        batch.drop_column("issuer")
