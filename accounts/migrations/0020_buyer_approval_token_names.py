"""Buyer approval (docs/security.md#buyer-accounts) and named API tokens.

Every buyer that exists when this runs is approved now (``buyer_approved_at`` = now, by nobody), so an existing
deployment's buyers keep buying; buyers who sign up later wait for the operator's approval.  Reversing drops the
columns (and the approvals with them).
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models
from django.utils import timezone


def approve_existing_buyers(apps, schema_editor):
    """Approve every buyer account that exists now (they were created by the operator: ``create_buyer``, the admin,
    the demo)."""
    User = apps.get_model("accounts", "User")
    User.objects.filter(role="buyer", buyer_approved_at__isnull=True).update(buyer_approved_at=timezone.now())


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0019_distribution_columns'),
        ('auth', '0012_alter_user_first_name_max_length'),
        ('knox', '0009_extend_authtoken_field'),
    ]

    operations = [
        migrations.CreateModel(
            name='TokenName',
            fields=[
                ('token', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, primary_key=True,
                                               related_name='token_name', serialize=False,
                                               to='knox.authtoken')),
                ('name', models.CharField(max_length=100)),
            ],
        ),
        migrations.AddField(
            model_name='user',
            name='buyer_approved_at',
            field=models.DateTimeField(blank=True, help_text='Buyers: when the operator approved this buyer account '
                                                             '(empty: awaiting approval, it may not buy yet).',
                                       null=True),
        ),
        migrations.AddField(
            model_name='user',
            name='buyer_approved_by',
            field=models.ForeignKey(blank=True, help_text='Buyers: who approved the account (empty: a command, the '
                                                          'demo, or approved before approvals).',
                                    null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+',
                                    to=settings.AUTH_USER_MODEL),
        ),
        migrations.RunPython(approve_existing_buyers, migrations.RunPython.noop, elidable=True),
        migrations.AddConstraint(
            model_name='user',
            constraint=models.CheckConstraint(
                condition=models.Q(('buyer_approved_at__isnull', True), ('role', 'buyer'), _connector='OR'),
                name='user_approval_only_buyers'),
        ),
    ]
