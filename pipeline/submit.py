"""The file to hand `spark-submit` (it wants a path, not a module): `sluice pipeline` under Spark's launcher.

    spark-submit --master yarn --deploy-mode client ... \\
        "$(python -c 'import sluice.pipeline.submit as m; print(m.__file__)')" report --input ... --out ...
"""

import sys

from sluice.pipeline.cli import main

if __name__ == "__main__":
    sys.exit(main())
