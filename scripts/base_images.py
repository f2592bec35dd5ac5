"""Local stand-ins for the base images the compose stack names, built without an image registry.

``scripts/base_images.sh`` runs it, and ``make compose-up``; ``--help`` lists its options.

Every ``FROM`` of the ``Dockerfile`` and every ``image:`` of ``docker-compose.yml`` that no service
builds must exist in the engine before ``docker compose build`` and ``up``, or the engine pulls it
from a registry. Where none is reachable, this builds each from Debian's packages: ``debootstrap
--variant=minbase bookworm`` makes a root file system from Debian's mirror, ``docker import`` turns
it into ``lakeflow-debian:bookworm-minbase``, and each stand-in's Dockerfile under
``docker/base-images/`` builds on that, tagged with the official name. An image the engine already
has (the official one, on a machine with a registry) is left alone: ``--rebuild`` replaces ours.
How each stand-in differs from the official image: docs/deployment.md.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COMPOSE_FILE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "Dockerfile"
STANDINS_DIR = REPO / "docker" / "base-images"
ROOT_IMAGE = "lakeflow-debian:bookworm-minbase"
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
# The official images' folders for each stand-in, under STANDINS_DIR.
STANDINS = {
    "python:3.11-slim-bookworm": "python",
    "postgres:15-bookworm": "postgres",
}
# The official debian image's sources, so that apt inside the stand-ins gets the point releases and
# the security updates.
SOURCES = """\
Types: deb
URIs: {mirror}
Suites: {suite} {suite}-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: {security}
Suites: {suite}-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""


@dataclass(frozen=True)
class Step:
    """One thing to build: ``image``, and the command lines that build it (run in that order)."""

    image: str
    commands: tuple[tuple[str, ...], ...]


def dockerfile_images(dockerfile: str) -> list[str]:
    """The images a Dockerfile builds ``FROM``, in order, without its own stages (``AS name``)."""
    stages: set[str] = set()
    images: list[str] = []
    for match in re.finditer(r"^\s*FROM\s+(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?", dockerfile, re.M | re.I):
        image, stage = match[1], match[2]
        if image.lower() not in stages and image.lower() != "scratch" and image not in images:
            images.append(image)
        if stage:
            stages.add(stage.lower())
    return images


def compose_images(compose: dict) -> list[str]:
    """The ``image:`` of each service that does not build it (those the engine must have or pull)."""
    images: list[str] = []
    for service in compose.get("services", {}).values():
        image = service.get("image")
        if image and "build" not in service and image not in images:
            images.append(image)
    return images


def required_images(compose: dict, dockerfile: str) -> list[str]:
    """Every base image the stack needs: the Dockerfile's ``FROM`` then the compose file's ``image:``."""
    images = dockerfile_images(dockerfile)
    return images + [image for image in compose_images(compose) if image not in images]


def standin_dir(image: str) -> Path | None:
    """The folder of the stand-in Dockerfile for ``image``, or None if there is none."""
    name = STANDINS.get(image)
    return STANDINS_DIR / name if name else None


def debootstrap_command(root: Path, mirror: str = MIRROR, suite: str = SUITE) -> tuple[str, ...]:
    return ("debootstrap", "--variant=minbase", suite, str(root), mirror)


def import_command(tag: str = ROOT_IMAGE) -> tuple[str, ...]:
    """``docker import`` of a root file system tar read on standard input."""
    return ("docker", "import", "--change", 'CMD ["bash"]', "-", tag)


def build_command(image: str, folder: Path) -> tuple[str, ...]:
    # --pull=false: the FROM is the imported root image, which no registry has.
    return ("docker", "build", "--pull=false", "-t", image, str(folder))


def plan(images: Iterable[str], present: Callable[[str], bool], rebuild: bool = False) -> list[Step]:
    """What to build, in order: the root image first if any stand-in is to be built and the engine
    lacks it (or ``rebuild``), then each stand-in the engine lacks (or all, with ``rebuild``). An
    image without a stand-in is not planned (``docker compose`` pulls it, or fails to)."""
    todo = [image for image in images if standin_dir(image) and (rebuild or not present(image))]
    steps = []
    if todo and (rebuild or not present(ROOT_IMAGE)):
        steps.append(Step(ROOT_IMAGE, (("debootstrap",), import_command())))
    for image in todo:
        steps.append(Step(image, (build_command(image, standin_dir(image)),)))
    return steps


def image_present(image: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode == 0


def load_inputs() -> tuple[dict, str]:
    import yaml

    return yaml.safe_load(COMPOSE_FILE.read_text()), DOCKERFILE.read_text()


def _build_root(work_dir: Path, mirror: str) -> None:
    """debootstrap a minimal bookworm into ``work_dir`` and import it as ROOT_IMAGE."""
    if shutil.which("debootstrap") is None:
        sys.exit("debootstrap is not installed: apt-get install debootstrap (as root)")
    with tempfile.TemporaryDirectory(prefix="bookworm-", dir=work_dir) as folder:
        root = Path(folder) / "root"
        print(f"==> {' '.join(debootstrap_command(root, mirror))}", flush=True)
        log = work_dir / "debootstrap.log"
        with log.open("w") as out:
            if subprocess.run(debootstrap_command(root, mirror), stdout=out, stderr=subprocess.STDOUT).returncode:
                sys.exit(f"debootstrap failed: see {log}")
        security = mirror.rstrip("/").removesuffix("/debian") + "/debian-security"
        (root / "etc/apt/sources.list").unlink(missing_ok=True)
        (root / "etc/apt/sources.list.d/debian.sources").write_text(
            SOURCES.format(mirror=mirror, suite=SUITE, security=security))
        # What an image should not carry: the downloaded packages and the package lists.
        for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for item in (root / cache).glob("*"):
                if item.is_file():
                    item.unlink()
        print(f"==> {' '.join(import_command())}", flush=True)
        tar = subprocess.Popen(["tar", "-C", str(root), "--numeric-owner", "-c", "."], stdout=subprocess.PIPE)
        imported = subprocess.run(import_command(), stdin=tar.stdout, capture_output=True, text=True)
        tar.stdout.close()
        if tar.wait() or imported.returncode:
            sys.exit(f"docker import failed: {imported.stderr}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--list", action="store_true",
                        help="print the images the stack needs, one a line, each present, stand-in "
                             "(this script builds it) or missing (no stand-in: pull it); build nothing")
    parser.add_argument("--rebuild", action="store_true", help="build the stand-ins even where the images exist")
    parser.add_argument("--mirror", default=MIRROR, help=f"Debian mirror for debootstrap (default {MIRROR})")
    parser.add_argument("--work-dir", default=str(REPO / ".pipeline" / "base-images"),
                        help="where debootstrap builds the root file system (removed after the import)")
    args = parser.parse_args(argv)

    images = required_images(*load_inputs())
    if args.list:
        for image in images:
            state = "present" if image_present(image) else ("stand-in" if standin_dir(image) else "missing")
            print(f"{image}\t{state}")
        return
    missing = [image for image in images if not standin_dir(image) and not image_present(image)]
    if missing:
        print(f"no stand-in for {', '.join(missing)}: docker compose will try to pull it", file=sys.stderr)
    work_dir = Path(args.work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    for step in plan(images, image_present, rebuild=args.rebuild):
        started = time.monotonic()
        if step.image == ROOT_IMAGE:
            _build_root(work_dir, args.mirror)
        else:
            for command in step.commands:
                print(f"==> {' '.join(command)}", flush=True)
                subprocess.run(command, check=True)
        print(f"built {step.image} in {time.monotonic() - started:.0f} s", flush=True)
    for image in images:
        if image_present(image):
            print(f"{image}: present")


if __name__ == "__main__":
    main()
