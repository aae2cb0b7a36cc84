"""rl_core/runtime/threads.py: where a thread that outlived a shutdown waits."""

import threading

from rl_core.runtime.threads import where_they_wait


def test_where_they_wait_names_each_live_thread_and_its_innermost_calls():
    release = threading.Event()

    def waits_for_a_peer():
        release.wait()

    waiting = threading.Thread(target=waits_for_a_peer, name="learner")
    ended = threading.Thread(target=lambda: None, name="actor-0")
    waiting.start(), ended.start()
    ended.join()
    try:
        text = where_they_wait([waiting, ended], frames=3)
        bare = where_they_wait([waiting], frames=1, named=False)
    finally:
        release.set()
        waiting.join()
    assert text.startswith("learner: wait (threading.py:") and "<- waits_for_a_peer (test_threads.py:" in text
    assert "actor-0" not in text  # (an ended thread waits for nothing)
    assert text.count(" <- ") == 2
    assert bare.startswith("wait (threading.py:") and " <- " not in bare
    assert where_they_wait([waiting]) == ""
