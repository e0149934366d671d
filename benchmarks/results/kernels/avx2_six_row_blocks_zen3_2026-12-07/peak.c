// FMA peak per core: 10 independent vfmadd chains per thread, both threads at once.  gcc -O3 -march=native -fopenmp peak.c -o peak && ./peak
#include <immintrin.h>
#include <stdio.h>
#include <time.h>
#include <omp.h>
int main(){ double best=0;
 #pragma omp parallel num_threads(2)
 { __m256 a[10]; for(int i=0;i<10;i++) a[i]=_mm256_set1_ps(i*0.001f);
   __m256 x=_mm256_set1_ps(0.9999f), y=_mm256_set1_ps(0.00001f);
   double t0=omp_get_wtime(); long it=200000000L;
   for(long i=0;i<it;i++){ for(int j=0;j<10;j++) a[j]=_mm256_fmadd_ps(a[j],x,y); }
   double t=omp_get_wtime()-t0; float s=0; for(int j=0;j<10;j++) s+=a[j][0];
   #pragma omp critical
   { printf("thread %d: %.1f GFLOP/s (%f)\n", omp_get_thread_num(), it*10*16/t/1e9, s); }
 }}
