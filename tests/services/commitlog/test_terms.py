"""Master terms: where a rejoining slave's log parts from its master's (``terms.py``)."""

import pytest

from services.commitlog.terms import NewerThanMaster, Terms, diverges_at


def test_a_former_master_cuts_at_the_promotion_of_its_slave():
    # A was master (no terms); B, its slave, was promoted at 5000; A holds 7000
    assert diverges_at([], [(1, 5000)], 7000) == 5000
    # A held no more than B when B was promoted: nothing to cut
    assert diverges_at([], [(1, 5000)], 5000) is None
    assert diverges_at([], [(1, 5000)], 4000) is None


def test_a_slave_in_its_masters_term_is_a_prefix():
    assert diverges_at([], [], 9000) is None
    assert diverges_at([(1, 5000)], [(1, 5000)], 9000) is None


def test_back_and_forth_cuts_at_the_latest_promotion():
    # B (terms [(1, 5000)]) was master until A, its slave, was promoted at 8000
    assert diverges_at([(1, 5000)], [(1, 5000), (2, 8000)], 9500) == 8000
    # a term both know but begun at different offsets parts at the lower one
    assert diverges_at([(1, 6000)], [(1, 5000)], 9000) == 5000


def test_a_slave_promoted_after_its_master_refuses_to_follow_it():
    with pytest.raises(NewerThanMaster, match="later than its master's last term 1"):
        diverges_at([(1, 5000), (2, 8000)], [(1, 5000)], 9000)


def test_terms_persist_and_adopt(tmp_path):
    t = Terms(tmp_path / "terms")
    assert t.current == 0
    assert t.begin(4096) == 1
    assert Terms(tmp_path / "terms").history == [(1, 4096)]
    t.adopt([(1, 4096), (2, 8192)])
    assert Terms(tmp_path / "terms").current == 2


def test_the_last_term_mastered_persists_and_adopting_leaves_it(tmp_path):
    path = tmp_path / "commitlog-terms"
    t = Terms(path)
    assert t.mastered is None  # never a master
    t.master_now()
    assert Terms(path).mastered == 0
    t.adopt([(1, 5000)])  # it followed a master promoted later
    assert Terms(path).current == 1 and Terms(path).mastered == 0
    t.begin(9000)  # promoted back
    assert Terms(path).mastered == 2
