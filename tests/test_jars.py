"""The JVM dependencies match the Python ones: Spark's Kafka connector must be pyspark's exact version.

A connector of another Spark version loads and then fails at the first batch with a linkage
error deep in the executor; these checks fail at once, naming both versions.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from importlib.metadata import version
from pathlib import Path

from rewind.runtime.jars import connector_jars, jars_dir

ROOT = Path(__file__).resolve().parents[1]
NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def pom_properties() -> dict[str, str]:
    props = ET.parse(ROOT / "pom.xml").getroot().find("m:properties", NS)
    assert props is not None
    return {el.tag.split("}")[1]: (el.text or "") for el in props}


def test_connector_version_is_pyspark_version() -> None:
    props = pom_properties()
    pinned = re.search(r"^pyspark==(\S+)", (ROOT / "requirements.txt").read_text(), re.M)
    assert pinned, "requirements.txt pins no pyspark"
    assert props["spark.version"] == pinned.group(1) == version("pyspark"), (
        f"pom.xml spark.version {props['spark.version']}, requirements.txt pyspark {pinned.group(1)}, "
        f"installed pyspark {version('pyspark')}: they must be one version")
    import pyspark

    scala = {m.group(1) for p in (Path(pyspark.__file__).parent / "jars").glob("spark-core_*.jar")
             if (m := re.match(r"spark-core_(2\.\d+)-", p.name))}
    assert scala == {props["scala.binary.version"]}


def test_fetched_jars_are_the_pinned_ones() -> None:
    props = pom_properties()
    names = {Path(j).name for j in connector_jars()}
    assert f"spark-sql-kafka-0-10_{props['scala.binary.version']}-{props['spark.version']}.jar" in names
    assert f"kafka-clients-{props['kafka.clients.version']}.jar" in names
    broker = f"kafka_{props['scala.binary.version']}-{props['kafka.broker.version']}.jar"
    assert (jars_dir() / "kafka" / broker).exists()


def test_missing_jars_name_the_fix(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import pytest

    from rewind.runtime.jars import JarsMissing, broker_classpath

    monkeypatch.setenv("REWIND_JARS", str(tmp_path))
    with pytest.raises(JarsMissing, match=r"make jars.*Maven"):
        connector_jars()
    with pytest.raises(JarsMissing, match=r"make jars"):
        broker_classpath()
    assert connector_jars(required=False) == []


def test_yarn_is_the_hadoop_of_pyspark() -> None:
    """The ResourceManager and NodeManagers (maven/yarn/pom.xml) speak YARN's protocol with the Hadoop client
    inside pyspark's jars (spark-submit, the ApplicationMaster): one Hadoop version for all three."""
    import pyspark

    props = ET.parse(ROOT / "maven" / "yarn" / "pom.xml").getroot().find("m:properties", NS)
    assert props is not None
    yarn = props.findtext("m:hadoop.version", namespaces=NS)
    client = {m.group(1) for p in (Path(pyspark.__file__).parent / "jars").glob("hadoop-client-api-*.jar")
              if (m := re.match(r"hadoop-client-api-(.+)\.jar", p.name))}
    assert {yarn} == {pom_properties()["hadoop.version"]} == client, (yarn, pom_properties()["hadoop.version"], client)
    assert (jars_dir() / "yarn" / f"hadoop-yarn-server-resourcemanager-{yarn}.jar").exists()
