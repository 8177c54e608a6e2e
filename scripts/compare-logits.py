#!/usr/bin/env python3
"""kiln's logits against llama.cpp's on the same GGUF, teacher-forced along
llama.cpp's greedy continuation: per generated position, llama.cpp's top-1
and its margin over the top-2, kiln's argmax, and the largest |Δlogit| over
the vocabulary. Greedy agreement is expected up to llama.cpp's first near tie.

  scripts/compare-logits.py MODEL.gguf "PROMPT" N_GEN

Needs llama.cpp's `kiln-golden-dump` (scripts/build-llama-cpp.sh) and kiln's
`logits-dump` example (`cargo build --release -p kiln-models --example
logits-dump`).
"""
import array, os, subprocess, sys, tempfile
HERE = os.path.dirname(os.path.abspath(__file__))
TMP = tempfile.mkdtemp(prefix='kiln-compare-')
B = os.path.expanduser('~/.cache/kiln/peers/llama.cpp-11434.0.0/build/bin/kiln-golden-dump')
M = sys.argv[1]
TARGET = os.environ.get('CARGO_TARGET_DIR', os.path.join(HERE, '..', 'target'))
DUMP = os.path.join(TARGET, 'release', 'examples', 'logits-dump')
p=subprocess.Popen([B,M,'512','0'],stdin=subprocess.PIPE,stdout=subprocess.PIPE,stderr=subprocess.DEVNULL,text=True)
def cmd(c):
    p.stdin.write(c+'\n'); p.stdin.flush(); return p.stdout.readline().strip()
meta=cmd('meta').split(); V=int(meta[1])
text = sys.argv[2]; ngen = int(sys.argv[3])
ids=[int(x) for x in cmd('tok 1 1 '+text.encode().hex()).split()[1:]]
r=cmd('eval 2 %d %s %s'%(ngen,os.path.join(TMP,'llama.bin'),' '.join(map(str,ids)))).split()
gen=[int(x) for x in r[2:]]
allids=ids+gen[:-1]
subprocess.run([DUMP,M,os.path.join(TMP,'kiln.bin')]+[str(i) for i in allids],check=True,stderr=subprocess.DEVNULL)
def rows(f):
    a=array.array('f'); a.frombytes(open(f,'rb').read()); return [a[i*V:(i+1)*V] for i in range(len(a)//V)]
L=rows(os.path.join(TMP,'llama.bin')); K=rows(os.path.join(TMP,'kiln.bin'))
n0=len(ids)
print('prompt ids',len(ids),'generated',len(gen))
worst=0
for i,(l,k) in enumerate(zip(L,K)):
    d=max(abs(x-y) for x,y in zip(l,k)); sc=max(abs(x) for x in l); worst=max(worst,d/sc)
    if i>=n0-1:
        top=sorted(range(V),key=lambda j:-l[j])[:2]; ka=max(range(V),key=lambda j:k[j])
        print('pos',i,'llama top',top[0],'margin %.3f'%(l[top[0]]-l[top[1]]),'kiln argmax',ka,'same' if ka==top[0] else 'DIFF','maxdiff %.3f scale %.2f'%(d,sc))
print('worst rel diff %.4f'%worst)
