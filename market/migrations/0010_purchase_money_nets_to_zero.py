"""On PostgreSQL, a completed purchase's money nets to zero, checked at commit (docs/money.md#a-purchase-nets-to-zero).

A deferred constraint trigger on the purchase (as django-hordak checks each transaction's legs): when a
purchase is written as completed, at the end of its transaction the sum of its money entries (the buyer's
debit, the platform's fee, the owners' shares) must be exactly zero, or the whole transaction is refused.
One check per purchase, one indexed sum over its entries.  SQLite, the embedded default, relies on the
service (``accounts.money.purchase.move_money``) and the budget audit's money checks.
"""
from django.db import migrations

FORWARD = """
CREATE OR REPLACE FUNCTION ldp_purchase_money_nets_to_zero() RETURNS trigger AS $$
DECLARE
    net numeric;
BEGIN
    SELECT COALESCE(SUM(amount), 0) INTO net FROM accounts_moneyentry WHERE purchase_id = NEW.id;
    IF net <> 0 THEN
        RAISE EXCEPTION 'the money entries of purchase %% sum to %%, not zero', NEW.id, net
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
CREATE CONSTRAINT TRIGGER market_purchase_money_nets_to_zero
    AFTER INSERT OR UPDATE OF status ON market_purchase
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.status = 'completed')
    EXECUTE FUNCTION ldp_purchase_money_nets_to_zero();
"""
BACKWARD = """
DROP TRIGGER IF EXISTS market_purchase_money_nets_to_zero ON market_purchase;
DROP FUNCTION IF EXISTS ldp_purchase_money_nets_to_zero();
"""


def forward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(FORWARD)


def backward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(BACKWARD)


class Migration(migrations.Migration):
    dependencies = [("market", "0009_purchase_excluded_budget"), ("accounts", "0011_money_entry_names")]
    operations = [migrations.RunPython(forward, backward)]
