B
last_chunkJ¢oâ¾Öm ?