"""Topic replication from the cluster's size unless asked: one broker gives one copy, three
give three with two in sync (the three-node case: tests/cluster/)."""

from __future__ import annotations

import pytest

from changebroker import kafka


def test_the_cluster_size_decides_unless_asked(kafka_bootstrap: str) -> None:
    brokers = len(kafka.admin(kafka_bootstrap).list_topics(timeout=10).brokers)
    expected = (
        kafka.Replication(1, 1)
        if brokers == 1
        else kafka.Replication(min(3, brokers), min(3, brokers) - 1)
    )
    found = kafka.replication(kafka_bootstrap, None, None)
    assert found == expected
    assert found.topic_config() == {"min.insync.replicas": str(expected.min_insync)}


def test_what_is_asked_wins_and_is_checked(kafka_bootstrap: str) -> None:
    assert kafka.replication(kafka_bootstrap, 3, 2) == kafka.Replication(3, 2)
    assert kafka.replication(kafka_bootstrap, 1, None) == kafka.Replication(1, 1)
    with pytest.raises(ValueError, match="between 1 and the replication factor"):
        kafka.replication(kafka_bootstrap, 1, 2)
