"""Users and their roles, as the factories make them."""
from __future__ import annotations

import pytest

from accounts.models import User
from tests.factories import (
    PASSWORD,
    AuditorFactory,
    BuyerFactory,
    DatasetFactory,
    OwnerFactory,
    StaffFactory,
    make_owners,
)


@pytest.mark.parametrize("factory,role", [(OwnerFactory, "owner"), (BuyerFactory, "buyer"),
                                          (AuditorFactory, "auditor"), (StaffFactory, "staff")])
def test_each_role_signs_in_with_its_password(db, client, factory, role):
    user = factory()
    assert user.role == role and user.check_password(PASSWORD)
    assert client.login(username=user.username, password=PASSWORD)
    assert User.objects.get(pk=user.pk).role == role


def test_bulk_owners_and_dataset_curators(db):
    owners = make_owners(5, "many")
    assert [o.role for o in owners] == ["owner"] * 5 and all(o.pk for o in owners)
    assert not owners[0].has_usable_password()
    assert DatasetFactory().curator.role == "staff"
