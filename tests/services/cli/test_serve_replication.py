"""``rmqstore serve`` hands the replication flags to its writer."""

from services.cli import serve
from services.cli.main import build_parser


def writer_flags(*argv: str) -> list[str]:
    args = build_parser().parse_args(["serve", *argv])
    spec = next(s for s in serve.SERVICES if s.module == "services.commitlog")
    return spec.flags(args, {"commitlog": 8100})


def test_serve_passes_the_slave_role_and_its_master_to_the_writer():
    flags = writer_flags("--role", "slave", "--ha-master", "10.0.0.1:10912",
                         "--ha-retry-seconds", "2")  # fmt: skip
    assert flags[flags.index("--role") + 1] == "slave"
    assert flags[flags.index("--ha-master") + 1] == "10.0.0.1:10912"
    assert float(flags[flags.index("--ha-retry-seconds") + 1]) == 2


def test_serve_runs_an_async_master_by_default():
    flags = writer_flags()
    assert flags[flags.index("--role") + 1] == "async_master"
    assert "--ha-master" not in flags


def test_serve_passes_the_masters_writer_for_the_history_check_and_config_copy():
    flags = writer_flags("--role", "slave", "--ha-master", "10.0.0.1:8106",
                         "--ha-master-commitlog", "10.0.0.1:8100",
                         "--config-copy-seconds", "5")  # fmt: skip
    assert flags[flags.index("--ha-master-commitlog") + 1] == "10.0.0.1:8100"
    assert float(flags[flags.index("--config-copy-seconds") + 1]) == 5


def test_serve_passes_demote_to_the_writer():
    assert "--demote" in writer_flags("--role", "slave", "--ha-master", "10.0.0.1:8106",
                                      "--demote")  # fmt: skip
    assert "--demote" not in writer_flags("--role", "slave", "--ha-master", "10.0.0.1:8106")
