"""`python -m localkube.hollow`: the kubelet of every simulated node (see kubelet.py)."""

import sys

from localkube.hollow.kubelet import main

sys.exit(main())
